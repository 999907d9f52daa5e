/*
 * settings.h
 *		dlock's settings (GUCs), read by every layer.
 */
#ifndef DLOCK_SETTINGS_H
#define DLOCK_SETTINGS_H

extern int	dlock_max_locks;
extern int	dlock_max_locks_per_database;
extern int	dlock_default_ttl_ms;
extern char *dlock_owner_setting;
extern bool dlock_durable;
extern int	dlock_lock_delay_ms;
extern bool dlock_worker_enabled;
extern int	dlock_worker_batch;
extern int	dlock_fence_grace_ms;
extern int	dlock_token_block;
extern int	dlock_failover_grace_ms;
extern bool dlock_flush_grants;
extern bool dlock_defer_rows;
extern bool dlock_events;

/* Defines them all; at module load, from shared_preload_libraries only. */
extern void dlock_settings_define(void);

#endif							/* DLOCK_SETTINGS_H */
