// Internal helpers of src/io: atomic file replacement.
#ifndef WEFT_IO_IMPL_H
#define WEFT_IO_IMPL_H

#include <stddef.h>

#include "../core/core_impl.h"

// Opens a new temporary file next to `path` (same directory, so rename() is
// atomic) and writes its name to tmp. Returns the fd, or -1 with an error.
int weft_io_open_temp(const char *path, char *tmp, size_t n);
// Finishes a temp file: when st is WEFT_OK, fsync + close + rename over path +
// fsync of the directory; otherwise (or on any failure) close and unlink the
// temp file. Returns the final status.
weft_status weft_io_commit_temp(int fd, const char *tmp, const char *path, weft_status st);

#endif
