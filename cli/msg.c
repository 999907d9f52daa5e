/*
 * msg.c
 *		The messages of the dlock command: one line on stderr each, with the
 *		program's name, and -v's extra ones.  Every other file writes through
 *		here; this file calls none of them.
 *
 * Copyright: the dlock authors; same licence as the extension.
 */
#include <inttypes.h>
#include <stdio.h>

#include "msg.h"

const char *progname = "dlock";

/* -v */
bool		verbose = false;

void
msg_va(const char *fmt, va_list ap)
{
	fprintf(stderr, "%s: ", progname);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
}

void
msg(const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	msg_va(fmt, ap);
	va_end(ap);
}

/* Formats a duration for messages: "1.5 s", "250 ms". */
const char *
fmt_ms(ms_t ms, char *buf, size_t len)
{
	if (ms < 1000 && ms > -1000)
		snprintf(buf, len, "%" PRId64 " ms", ms);
	else
		snprintf(buf, len, "%.1f s", ms / 1000.0);
	return buf;
}
