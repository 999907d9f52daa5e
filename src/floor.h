/*
 * floor.h
 *		What the rebuild (rebuild.c) needs of floor.c: the stored token floor.
 */
#ifndef DLOCK_FLOOR_H
#define DLOCK_FLOOR_H

extern uint64 dlock_floor_read(void);

#endif							/* DLOCK_FLOOR_H */
