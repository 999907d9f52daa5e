/*
 * signals.c
 *		The signal dispositions of "dlock run": signals arrive as bytes on a
 *		self-pipe, which every wait of run polls (loop.c); the command gets the
 *		dispositions dlock started with.
 *
 * Copyright: the dlock authors; same licence as the extension.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "msg.h"
#include "signals.h"

/* A pipe whose ends are close-on-exec (and non-blocking, if asked). */
int
make_pipe(int fds[2], bool nonblocking)
{
	if (pipe(fds) != 0)
		return -1;
	for (int i = 0; i < 2; i++)
	{
		if (fcntl(fds[i], F_SETFD, FD_CLOEXEC) != 0 ||
			(nonblocking && fcntl(fds[i], F_SETFL, O_NONBLOCK) != 0))
		{
			close(fds[0]);
			close(fds[1]);
			return -1;
		}
	}
	return 0;
}

/* Signals forwarded to the command's process group. */
static const int forwarded_signals[] = {
	SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2
};

/*
 * Signals dlock ignores while it runs: a stopped dlock could not renew the
 * lease while the command went on (SIGTSTP, SIGTTIN, SIGTTOU), and libpq
 * must not die of SIGPIPE.  The command gets the dispositions dlock started
 * with.
 */
static const int ignored_signals[] = {
	SIGPIPE, SIGTSTP, SIGTTIN, SIGTTOU
};

int			sigpipe_fds[2] = {-1, -1};
static struct sigaction saved_actions[NSIG];
static bool saved[NSIG];

const char *
signame(int sig)
{
	switch (sig)
	{
		case SIGINT:
			return "SIGINT";
		case SIGTERM:
			return "SIGTERM";
		case SIGHUP:
			return "SIGHUP";
		case SIGQUIT:
			return "SIGQUIT";
		case SIGUSR1:
			return "SIGUSR1";
		case SIGUSR2:
			return "SIGUSR2";
		case SIGKILL:
			return "SIGKILL";
		case SIGCHLD:
			return "SIGCHLD";
		default:
			return "signal";
	}
}

static void
signal_to_pipe(int sig)
{
	int			save_errno = errno;
	unsigned char b = (unsigned char) sig;

	if (write(sigpipe_fds[1], &b, 1) < 0)
	{
		/* pipe full: a wakeup is pending anyway */
	}
	errno = save_errno;
}

static void
set_action(int sig, void (*handler) (int))
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = handler;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	if (sig == SIGCHLD)
		sa.sa_flags |= SA_NOCLDSTOP;
	if (!saved[sig])
	{
		sigaction(sig, NULL, &saved_actions[sig]);
		saved[sig] = true;
	}
	sigaction(sig, &sa, NULL);
}

/*
 * Installs the self-pipe and the handlers of "run".  A forwarded signal that
 * was ignored when dlock started (nohup, an asynchronous command of a
 * non-interactive shell) stays ignored, for dlock and for the command, as a
 * shell would do.
 */
void
setup_signals(void)
{
	if (make_pipe(sigpipe_fds, true) != 0)
	{
		msg("cannot create a pipe: %s", strerror(errno));
		exit(EXIT_OSERR);
	}
	for (size_t i = 0; i < sizeof(forwarded_signals) / sizeof(int); i++)
	{
		int			sig = forwarded_signals[i];
		struct sigaction old;

		sigaction(sig, NULL, &old);
		if (old.sa_handler == SIG_IGN)
			continue;
		set_action(sig, signal_to_pipe);
	}
	for (size_t i = 0; i < sizeof(ignored_signals) / sizeof(int); i++)
		set_action(ignored_signals[i], SIG_IGN);
	set_action(SIGCHLD, signal_to_pipe);
}

/* In the child: the dispositions dlock started with. */
void
restore_signals(void)
{
	for (int sig = 1; sig < NSIG; sig++)
		if (saved[sig])
			sigaction(sig, &saved_actions[sig], NULL);
}
