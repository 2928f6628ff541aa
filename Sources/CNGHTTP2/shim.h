// nghttp2 (Debian's libnghttp2-dev): the HTTP/2 framing, HPACK and flow control of the HTTP server sessions.
#ifndef HERALD_CNGHTTP2_SHIM_H
#define HERALD_CNGHTTP2_SHIM_H

#include <nghttp2/nghttp2.h>

#endif
