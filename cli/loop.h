/*
 * loop.h
 *		The one place the dlock command waits: poll() on a socket, with a
 *		deadline, serving on every wakeup what the caller hooked in.
 *
 * Copyright: the dlock authors; same licence as the extension.
 */
#ifndef DLOCK_LOOP_H
#define DLOCK_LOOP_H

#include <stdbool.h>

#include "cli.h"

/*
 * What a waiting caller hooks in ("run": its signals, its children and its
 * kill deadlines).  Without hooks a wait is a plain poll() of its socket.
 */
typedef struct
{
	int			wake_fd;		/* polled for input as well, or -1 */
	void		(*service) (void *arg); /* acts on whatever is due */
	ms_t		(*next_timer) (void *arg);	/* when service() is next due */
	bool		(*abandoned) (void *arg);	/* a wait no longer wanted */
	void	   *arg;
} LoopHooks;

extern void loop_set_hooks(const LoopHooks *h);
extern int	wait_io(int fd, short events, ms_t deadline);
extern bool io_abandoned(void);
extern void sleep_until(ms_t deadline);

#endif							/* DLOCK_LOOP_H */
