/*
 * rows.h
 *		What the sweep (sweep.c) needs of rows.c: its commit's wait.
 */
#ifndef DLOCK_ROWS_H
#define DLOCK_ROWS_H

extern void dlock_rows_promise_commit(void);

#endif							/* DLOCK_ROWS_H */
