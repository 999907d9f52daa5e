/*
 * args.h
 *		The command line of dlock, read and checked.
 *
 * Copyright: the dlock authors; same licence as the extension.
 */
#ifndef DLOCK_ARGS_H
#define DLOCK_ARGS_H

#include "cli.h"

typedef enum
{
	CMD_RUN,
	CMD_TRY,
	CMD_RELEASE,
	CMD_STATUS,
	CMD_WATCH
} Command;

typedef struct
{
	Command		command;
	const char *conninfo;		/* -d; NULL: libpq's defaults */
	bool		verbose;		/* -v */
	const char *name;			/* status: NULL for every name */
	const char *owner;			/* run, try: the default unless given */
	const char *token;			/* release: NULL unless given */
	const char *mode;			/* run, try: "exclusive" or "shared" */
	const char *permits;		/* run, try: a semaphore's size, as text */
	ms_t		ttl_ms;			/* run, try */
	ms_t		grace_ms;		/* run */
	ms_t		at_least_ms;	/* run: minimum hold (min_hold); 0: none */
	const char *lifetime;		/* run: "ttl" or "session"; NULL: not given */
	ms_t		timeout_ms;		/* run: -1 waits until granted */
	bool		nowait;			/* run */
	bool		queue;			/* run: wait as a queued request */
	char	  **argv;			/* run: the command and its arguments */
	char	  **names;			/* watch: the names (none: every name) */
	int			nnames;
	bool		json;			/* watch: print the payloads */
} Args;

extern void parse_args(int argc, char **argv, Args *a);

#endif							/* DLOCK_ARGS_H */
