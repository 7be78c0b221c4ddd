// Thread-local error state: every failing call leaves one message here.
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core_impl.h"

static _Thread_local char g_msg[1024];
static _Thread_local weft_status g_status = WEFT_OK;

static void set_msg(weft_status s, const char *fmt, va_list ap) {
    g_status = s;
    // Through a copy: callers wrap the previous message
    // (weft_error(s, "op: %s", weft_last_error())), which lives in g_msg.
    char buf[sizeof g_msg];
    vsnprintf(buf, sizeof buf, fmt, ap);
    memcpy(g_msg, buf, sizeof g_msg);
}

weft_status weft_error(weft_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_msg(s, fmt, ap);
    va_end(ap);
    return s;
}

void *weft_error_null(weft_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_msg(s, fmt, ap);
    va_end(ap);
    return NULL;
}

void *weft_error_null_input(const char *op) {
    // A NULL input usually means an earlier call failed: keep its message.
    if (g_status == WEFT_OK) weft_error(WEFT_ERR_ARG, "%s: input is NULL", op);
    return NULL;
}

const char *weft_last_error(void) { return g_status == WEFT_OK ? "" : g_msg; }
weft_status weft_last_status(void) { return g_status; }
void weft_clear_error(void) {
    g_status = WEFT_OK;
    g_msg[0] = 0;
}

const char *weft_status_name(weft_status s) {
    switch (s) {
    case WEFT_OK: return "ok";
    case WEFT_ERR_ARG: return "bad argument";
    case WEFT_ERR_SHAPE: return "shape mismatch";
    case WEFT_ERR_DTYPE: return "bad dtype";
    case WEFT_ERR_DEVICE: return "device error";
    case WEFT_ERR_UNSUPPORTED: return "unsupported";
    case WEFT_ERR_OOM: return "out of memory";
    case WEFT_ERR_STATE: return "bad state";
    case WEFT_ERR_IO: return "i/o error";
    case WEFT_ERR_FORMAT: return "malformed data";
    }
    return "unknown";
}

#define WEFT_STR2(x) #x
#define WEFT_STR(x) WEFT_STR2(x)
const char *weft_version(void) {
    return WEFT_STR(WEFT_VERSION_MAJOR) "." WEFT_STR(WEFT_VERSION_MINOR) "." WEFT_STR(WEFT_VERSION_PATCH);
}
