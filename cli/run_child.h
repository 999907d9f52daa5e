/*
 * run_child.h
 *		The command that "dlock run" runs, and its processes.
 *
 * Copyright: the dlock authors; same licence as the extension.
 */
#ifndef DLOCK_RUN_CHILD_H
#define DLOCK_RUN_CHILD_H

#include "run_state.h"

extern void become_subreaper(RunState *st);
extern bool start_child(RunState *st, char **argv);
extern void declare_lost(RunState *st, ms_t kill_deadline, const char *why);
extern void run_service(RunState *st);
extern ms_t run_next_timer(const RunState *st);

#endif							/* DLOCK_RUN_CHILD_H */
