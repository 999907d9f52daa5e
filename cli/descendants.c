/*
 * descendants.c
 *		dlock's descendants, as /proc lists them (Linux only): the processes
 *		whose chain of parents leads to dlock, whatever group or session they
 *		moved to, and a way to signal one that never hits a reused pid.
 *
 * Copyright: the dlock authors; same licence as the extension.
 */
#ifdef __linux__
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "descendants.h"

ProcInfo   *procs = NULL;
size_t		nprocs = 0;
static size_t procs_size = 0;

/*
 * Reads the parent and the process group of a process from its "stat" file
 * (path, relative to dirfd).  Returns false if the process is gone.
 */
static bool
read_stat(int dirfd, const char *path, pid_t *ppid, pid_t *pgrp)
{
	char		buf[256];
	char	   *p;
	ssize_t		n;
	int			fd;
	int			pp;
	int			pg;

	fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	/* "pid (comm) state ppid pgrp ...", where comm may hold ')' and spaces */
	p = strrchr(buf, ')');
	if (p == NULL || sscanf(p + 1, " %*c %d %d", &pp, &pg) != 2)
		return false;
	*ppid = (pid_t) pp;
	*pgrp = (pid_t) pg;
	return true;
}

static int
compare_procs(const void *a, const void *b)
{
	pid_t		pa = ((const ProcInfo *) a)->pid;
	pid_t		pb = ((const ProcInfo *) b)->pid;

	return pa < pb ? -1 : pa > pb;
}

/* Whether pid is dlock or, by the last scan, one of its descendants. */
static bool
is_ours(pid_t pid)
{
	ProcInfo	key;
	ProcInfo   *p;

	if (pid == getpid())
		return true;
	key.pid = pid;
	p = bsearch(&key, procs, nprocs, sizeof(ProcInfo), compare_procs);
	return p != NULL && p->ours;
}

/*
 * Lists the processes of /proc and marks dlock's descendants, those whose
 * chain of parents leads to dlock.  Returns false if /proc cannot be read.
 */
bool
scan_processes(void)
{
	DIR		   *dir = opendir("/proc");
	struct dirent *de;
	bool		changed;

	nprocs = 0;
	if (dir == NULL)
		return false;
	while ((de = readdir(dir)) != NULL)
	{
		char		path[sizeof(de->d_name) + 8];
		ProcInfo	p;

		if (!isdigit((unsigned char) de->d_name[0]))
			continue;
		p.pid = (pid_t) strtol(de->d_name, NULL, 10);
		p.ours = false;
		snprintf(path, sizeof(path), "%s/stat", de->d_name);
		if (!read_stat(dirfd(dir), path, &p.ppid, &p.pgrp))
			continue;			/* gone meanwhile */
		if (nprocs == procs_size)
		{
			size_t		size = procs_size ? procs_size * 2 : 512;
			ProcInfo   *bigger = realloc(procs, size * sizeof(ProcInfo));

			if (bigger == NULL)
			{
				closedir(dir);
				nprocs = 0;
				return false;
			}
			procs = bigger;
			procs_size = size;
		}
		procs[nprocs++] = p;
	}
	closedir(dir);
	qsort(procs, nprocs, sizeof(ProcInfo), compare_procs);
	/* one pass marks at least one more generation */
	do
	{
		changed = false;
		for (size_t i = 0; i < nprocs; i++)
		{
			if (!procs[i].ours && procs[i].pid > 1 && is_ours(procs[i].ppid))
			{
				procs[i].ours = true;
				changed = true;
			}
		}
	} while (changed);
	return true;
}

/*
 * Sends sig to a descendant found by the last scan.  The process is named by
 * a descriptor of its /proc directory, which stays bound to that process
 * even if its pid is reused, and its parent is read again through it, so a
 * pid that has passed to another process meanwhile is never signalled.
 */
void
signal_process(pid_t pid, int sig)
{
	char		path[32];
	pid_t		ppid;
	pid_t		pgrp;
	int			fd;

	snprintf(path, sizeof(path), "/proc/%d", (int) pid);
	fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return;					/* gone */
	if (read_stat(fd, "stat", &ppid, &pgrp) && is_ours(ppid))
	{
#ifdef SYS_pidfd_send_signal
		if (syscall(SYS_pidfd_send_signal, fd, sig, NULL, 0) != 0 && errno == ENOSYS)
			kill(pid, sig);		/* Linux before 5.1 */
#else
		kill(pid, sig);
#endif
	}
	close(fd);
}
#endif							/* __linux__ */
