/*
 * signals.h
 *		The signal dispositions of "dlock run" and its self-pipe.
 *
 * Copyright: the dlock authors; same licence as the extension.
 */
#ifndef DLOCK_SIGNALS_H
#define DLOCK_SIGNALS_H

#include <stdbool.h>

/* the self-pipe: a caught signal's number is written to [1], read from [0] */
extern int	sigpipe_fds[2];

extern void setup_signals(void);
extern void restore_signals(void);
extern const char *signame(int sig);
extern int	make_pipe(int fds[2], bool nonblocking);

#endif							/* DLOCK_SIGNALS_H */
