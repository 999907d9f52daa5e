/*
 * loop.c
 *		The one place the dlock command waits: poll() on a socket (a libpq
 *		connection) and on the caller's wake-up descriptor, with a deadline.
 *
 * Whoever waits for the server goes through wait_io() (session.c does, for
 * every connection attempt and query), so "run" serves its signals and kill
 * deadlines while a query runs: it hooks its service and timers in with
 * loop_set_hooks(), and this file calls them on every wakeup.  The hooks
 * are function pointers, so this file calls no file above it; the one-shot
 * subcommands set none and wait on their socket alone.
 *
 * Copyright: the dlock authors; same licence as the extension.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "loop.h"
#include "msg.h"

/* the caller's hooks; set: whether there are any */
static LoopHooks hooks;
static bool set = false;

/* Installs the caller's hooks; NULL removes them. */
void
loop_set_hooks(const LoopHooks *h)
{
	set = h != NULL;
	if (set)
		hooks = *h;
}

/* Whether a query or connection attempt in progress is no longer wanted. */
bool
io_abandoned(void)
{
	return set && hooks.abandoned(hooks.arg);
}

/* poll()'s timeout to wake up at wake: -1 for never, 0 if it has passed. */
static int
poll_timeout(ms_t wake)
{
	ms_t		now = now_ms();

	if (wake == NEVER)
		return -1;
	if (wake <= now)
		return 0;
	return wake - now > INT_MAX ? INT_MAX : (int) (wake - now);
}

/*
 * Waits until fd is ready for events, until deadline, or, if abandonable,
 * until io_abandoned(); runs the service hook on every wakeup.  Returns 1
 * when fd is ready, 0 at the deadline, -1 when abandoned.  With fd < 0 it
 * returns (0) after the first wakeup, because the caller's state may have
 * changed.
 */
static int
wait_for(int fd, short events, ms_t deadline, bool abandonable)
{
	for (;;)
	{
		struct pollfd p[2];
		ms_t		wake = min_ms(deadline, set ? hooks.next_timer(hooks.arg) : NEVER);
		int			n;
		int			nfds = 0;
		int			fd_idx = -1;

		if (abandonable && io_abandoned())
			return -1;
		if (set && hooks.wake_fd >= 0)
		{
			p[nfds].fd = hooks.wake_fd;
			p[nfds].events = POLLIN;
			p[nfds].revents = 0;
			nfds++;
		}
		if (fd >= 0)
		{
			fd_idx = nfds;
			p[nfds].fd = fd;
			p[nfds].events = events;
			p[nfds].revents = 0;
			nfds++;
		}
		n = poll(p, nfds, poll_timeout(wake));
		if (n < 0 && errno != EINTR)
		{
			msg("poll failed: %s", strerror(errno));
			exit(EXIT_OSERR);
		}
		if (set)
			hooks.service(hooks.arg);
		if (abandonable && io_abandoned())
			return -1;
		if (n > 0 && fd_idx >= 0 && p[fd_idx].revents != 0)
			return 1;
		if (fd < 0 || now_ms() >= deadline)
			return 0;
	}
}

/* Waits for a connection's socket; given up when io_abandoned(). */
int
wait_io(int fd, short events, ms_t deadline)
{
	return wait_for(fd, events, deadline, true);
}

/*
 * Sleeps until deadline or the next wakeup (a signal, a timer), whichever
 * comes first, and serves it.
 */
void
sleep_until(ms_t deadline)
{
	wait_for(-1, 0, deadline, false);
}
