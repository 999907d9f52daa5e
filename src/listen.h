/*
 * listen.h
 *		Which databases may have a backend listening to channel dlock: see
 *		listen.c.
 */
#ifndef DLOCK_LISTEN_H
#define DLOCK_LISTEN_H

extern Size dlock_listen_shmem_size(void);
extern void dlock_listen_shmem_init(void);
extern void dlock_listen_hook(void);
extern bool dlock_listened(Oid dbid);

#endif							/* DLOCK_LISTEN_H */
