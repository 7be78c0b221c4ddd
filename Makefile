# weft — top-level driver for CMake + CTest.
#   make            build libweft.so, libweft.a and the weft CLI (build/)
#   make test       install missing Debian packages (as root), build, run ctest
#   make test-asan  the suite under AddressSanitizer + UBSan (build-asan/)
#   make bench      benchmarks vs the PyTorch twins (BENCH=<pattern> to filter); WEFT_BENCH_THREADS="1 2 4 8 16"
#                   runs each at every thread count up to nproc, the peer at the same count, one line per
#                   count (docs/benchmarks.md)
#   make bench-deps the peers: PyTorch 2.x from PyPI in .venv-bench/ (git-ignored), Debian's
#                   python3-torch (1.13) as the fallback bench/run.sh uses when the venv is missing
#   make run        the main job: install what is missing (data sets too), build,
#                   train the Fashion-MNIST MLP (models/fmnist-mlp.cfg) and print its final line
#   make check-gpu  on a machine with a GPU: build with CUDA, run the CUDA tests and the suite,
#                   train every standard model on cuda and the CPU, compare (tools/check-gpu.sh)
#   make fuzz       libFuzzer harnesses of every parser (clang, ASan + UBSan, build-fuzz/), each run for
#                   FUZZ_SECONDS (default 60), one line per harness (FUZZ=graph: that one only);
#                   see docs/reliability.md
#   make install    install to PREFIX (default /usr/local)

BUILD ?= build
PREFIX ?= /usr/local
JOBS ?= $(shell nproc)
BENCH ?=
DEPS = build-essential cmake pkg-config libopenblas-dev libopenblas0-openmp libdnnl-dev zlib1g-dev libcjson-dev \
       openmpi-bin libopenmpi-dev libprotobuf-c-dev protobuf-c-compiler libonnx-testdata python3-onnx
BENCH_DEPS = python3-torch python3-numpy python3-venv
VENV ?= .venv-bench
RUN_DEPS = dataset-fashion-mnist bible-kjv
MODEL ?= models/fmnist-mlp.cfg
FUZZ_SECONDS ?= 60
FUZZ ?=
FUZZ_DEPS = clang libclang-rt-14-dev libomp-14-dev

.PHONY: all build deps bench-deps run-deps test test-asan bench run install clean check-gpu fuzz

all: build

deps:
	@missing=""; for p in $(DEPS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then echo "installing:$$missing"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	  else echo "missing Debian packages:$$missing (run as root or: sudo apt-get install$$missing)"; fi; \
	fi

bench-deps:
	@$(MAKE) --no-print-directory deps DEPS="$(BENCH_DEPS) $(RUN_DEPS)"
	@if $(VENV)/bin/python3 -c 'import torch, numpy' 2>/dev/null; then \
	  echo "$(VENV): torch $$($(VENV)/bin/python3 -c 'import torch; print(torch.__version__)')"; \
	else \
	  echo "$(VENV): installing PyTorch 2.x and numpy from PyPI (the benchmark peer)"; \
	  python3 -m venv $(VENV) && $(VENV)/bin/pip install -q --disable-pip-version-check 'torch>=2' numpy; \
	fi

run-deps:
	@$(MAKE) --no-print-directory deps DEPS="$(RUN_DEPS)"

$(BUILD)/Makefile:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=$(PREFIX)

build: $(BUILD)/Makefile
	cmake --build $(BUILD) -j $(JOBS)

test: deps run-deps
	$(MAKE) build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

test-asan: deps
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DWEFT_ASAN=ON
	cmake --build build-asan -j $(JOBS)
	cd build-asan && WEFT_NO_CACHING=1 ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j $(JOBS)

bench: deps bench-deps
	$(MAKE) build
	@BUILD=$(BUILD) BENCH='$(BENCH)' bash bench/run.sh

run: deps run-deps
	$(MAKE) build
	$(BUILD)/weft train $(MODEL) --log-dir runs/$(notdir $(basename $(MODEL))) --ckpt-dir runs/$(notdir $(basename $(MODEL)))/ckpt

check-gpu: deps run-deps
	bash tools/check-gpu.sh

# CPU only (the parsers are host code), tests off: the harnesses and the library they fuzz.
fuzz: deps
	@$(MAKE) --no-print-directory deps DEPS="$(FUZZ_DEPS)"
	cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWEFT_FUZZ=ON \
	      -DWEFT_CUDA=OFF -DWEFT_BUILD_TESTS=OFF
	cmake --build build-fuzz -j $(JOBS) --target fuzz_all
	sh tests/fuzz/run.sh build-fuzz $(FUZZ_SECONDS) $(FUZZ)

install: build
	cmake --install $(BUILD)

clean:
	rm -rf $(BUILD) build-asan build-fuzz
