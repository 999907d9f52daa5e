/*
 * worker.h
 *		The background worker that ends leases on time in every database,
 *		and the short-lived per-database sweepers it sends to delete rows
 *		and senders it sends to send change events.
 */
#ifndef DLOCK_WORKER_H
#define DLOCK_WORKER_H

extern void dlock_worker_register(void);

extern PGDLLEXPORT void dlock_worker_main(Datum arg);
extern PGDLLEXPORT void dlock_sweeper_main(Datum arg);
extern PGDLLEXPORT void dlock_sender_main(Datum arg);

#endif							/* DLOCK_WORKER_H */
