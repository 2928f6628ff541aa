#ifndef HERALD_CHTTPPARSER_SHIM_H
#define HERALD_CHTTPPARSER_SHIM_H

#include <http_parser.h>

/* HTTP_PARSER_ERRNO is a macro; Swift cannot call it. */
static inline enum http_errno herald_http_errno(const http_parser *parser) { return HTTP_PARSER_ERRNO(parser); }

#endif
