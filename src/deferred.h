/*
 * deferred.h
 *		Leases whose rows are deferred, kept across a clean restart
 *		(deferred.c): for the rebuild.  The module load's call is in store.h.
 */
#ifndef DLOCK_DEFERRED_H
#define DLOCK_DEFERRED_H

#include "engine.h"

extern int	dlock_deferred_restore(void);

#endif							/* DLOCK_DEFERRED_H */
