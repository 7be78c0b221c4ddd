# weft — top-level driver for CMake + CTest.
#   make            build libweft.so, libweft.a and the weft CLI (build/)
#   make test       install missing Debian packages (as root), build, run ctest
#   make test-asan  the suite under AddressSanitizer + UBSan (build-asan/)
#   make bench      benchmarks vs the PyTorch twins (BENCH=<pattern> to filter)
#   make run        the main job: build and run the examples
#   make install    install to PREFIX (default /usr/local)

BUILD ?= build
PREFIX ?= /usr/local
JOBS ?= $(shell nproc)
BENCH ?=
DEPS = build-essential cmake pkg-config libopenblas-dev libopenblas0-openmp zlib1g-dev libcjson-dev
BENCH_DEPS = python3-torch python3-numpy

.PHONY: all build deps bench-deps test test-asan bench run install clean

all: build

deps:
	@missing=""; for p in $(DEPS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then echo "installing:$$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else echo "missing Debian packages:$$missing (run as root or: sudo apt-get install$$missing)"; fi; \
	fi

bench-deps:
	@missing=""; for p in $(BENCH_DEPS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing || true; fi

$(BUILD)/Makefile:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=$(PREFIX)

build: $(BUILD)/Makefile
	cmake --build $(BUILD) -j $(JOBS)

test: deps
	$(MAKE) build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-asan: deps
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DWEFT_ASAN=ON
	cmake --build build-asan -j $(JOBS)
	cd build-asan && WEFT_NO_CACHING=1 ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j $(JOBS)

bench: deps bench-deps
	$(MAKE) build
	@BUILD=$(BUILD) BENCH='$(BENCH)' bash bench/run.sh

run: deps
	$(MAKE) build
	@for e in $(BUILD)/example_*; do echo "== $$e"; $$e || exit 1; done

install: build
	cmake --install $(BUILD)

clean:
	rm -rf $(BUILD) build-asan
