/*
 * descendants.h
 *		dlock's descendants, as /proc lists them (Linux only).
 *
 * Copyright: the dlock authors; same licence as the extension.
 */
#ifndef DLOCK_DESCENDANTS_H
#define DLOCK_DESCENDANTS_H

#ifdef __linux__
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

/* A process listed in /proc, and whether it descends from dlock. */
typedef struct
{
	pid_t		pid;
	pid_t		ppid;
	pid_t		pgrp;
	bool		ours;
} ProcInfo;

/* the last scan, sorted by pid */
extern ProcInfo *procs;
extern size_t nprocs;

extern bool scan_processes(void);
extern void signal_process(pid_t pid, int sig);
#endif							/* __linux__ */

#endif							/* DLOCK_DESCENDANTS_H */
