/*
 * queue.h
 *		Queued requests that hold no backend: see queue.c.
 */
#ifndef DLOCK_QUEUE_H
#define DLOCK_QUEUE_H

#include "engine.h"

/* Under the name's partition lock, held exclusively */
extern bool dlock_queue_prune(DLockEntry *head, int64 now);
extern bool dlock_queue_join(DLockEntry *head, const DLockRequest *req,
							 int64 hold, int64 now);

/* Holding no lock */
extern bool dlock_queue_leave(const DLockRequest *req);
extern int64 dlock_queue_expire(void);

#endif							/* DLOCK_QUEUE_H */
