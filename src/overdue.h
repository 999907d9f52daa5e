/*
 * overdue.h
 *		A lease's pinners kept past dlock.fence_grace, and their termination
 *		by the name's head waiter: see overdue.c.
 */
#ifndef DLOCK_OVERDUE_H
#define DLOCK_OVERDUE_H

#include "wait.h"

/* A backend that pins a lease past dlock.fence_grace, to be terminated */
typedef struct DLockOverdue
{
	int			pid;
	uint64		token;
	int64		overdue_ms;
} DLockOverdue;

extern void dlock_overdue_prepare(void);
extern void dlock_overdue_begin(bool holds_pins);
extern int64 dlock_sooner(int64 a, int64 b);
extern int	dlock_find_overdue(DLockEntry *head, int64 now, DLockOverdue *out,
							   int max, int64 *look_at);
extern void dlock_terminate_overdue(const DLockWaiter *w,
									const DLockOverdue *overdue, int n);

#endif							/* DLOCK_OVERDUE_H */
