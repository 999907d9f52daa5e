/*
 * xact.c
 *		Transaction and subtransaction callbacks for lease changes.
 *
 * Each change is logged with the nesting level that made it.  A new grant
 * takes effect at once; an aborted (sub)transaction takes it back.  Renewals
 * and extensions pin the lease (it cannot end while the transaction is
 * open) and releases are only recorded: the top-level commit applies them,
 * an abort forgets them.  So shared memory changes a lease's expiry or ends
 * it only when the row write that says so has committed, and a rolled-back
 * write never touches it.  A committed subtransaction hands its log to its
 * parent.  The top-level commit also records the change events of its
 * grants and releases (events.c), after it commits and before it applies
 * them; a sender sends them.
 *
 * Locking: the log is backend-local; applying it takes the partition lock
 * of one name at a time (through wait.c).
 */
#include "postgres.h"

#include "access/xact.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "events.h"
#include "lifetime.h"
#include "wait.h"
#include "xact.h"

typedef enum DLockOpKind
{
	DLOCK_OP_ACQUIRE,
	DLOCK_OP_RELEASE,
	DLOCK_OP_RENEW,
	DLOCK_OP_FENCE				/* a pin taken by dlock_fence() */
} DLockOpKind;

typedef struct DLockOp
{
	DLockOpKind kind;
	int			level;			/* transaction nesting level */
	bool		renewal;		/* RENEW: by dlock_renew (counted), not an
								 * extension by a new acquisition */
	bool		supersedes;		/* RENEW: made an earlier release moot;
								 * RELEASE: a force release, made one within
								 * the minimum hold moot */
	struct DLockOp *superseded_by;	/* RELEASE: the later acquisition of the
									 * same lease, or force release, that made
									 * it moot */
	DLockKey	key;
	uint32		hash;
	DLockOwner	owner;
	uint64		token;			/* 0: no effect (not completed) */
	bool		durable;		/* RELEASE: the lease's row was deleted;
								 * ACQUIRE: the grant wrote a row */
	bool		clears;			/* ACQUIRE: the grant deleted the rows of the
								 * name's ended leases */
	uint8		lifetime;		/* ACQUIRE: DLockLifetime of the grant */
	int64		expires;		/* RENEW: new expiry; RELEASE: within the
								 * lease's minimum hold, when it ends (0: at
								 * once) */
	int64		version;		/* RENEW, RELEASE within the hold: the row
								 * version it wrote (0: none) */
	TimestampTz released_at;	/* RELEASE within the hold: when */
	bool		forced;			/* RELEASE: by dlock_force_release */
	uint8		mode;			/* ACQUIRE with events: the lease's mode */
	uint64		event_seq;		/* ACQUIRE: its grant event's seq; 0: none */
	TransactionId adopted;		/* RENEW, FENCE: wrote the row of a deferred
								 * lease, as this xid (else invalid) */
	bool		marked;			/* RELEASE: of a deferred lease, which it
								 * made this transaction the decider of */
} DLockOp;

static List *ops = NIL;			/* in TopTransactionContext */
static bool registered = false;

/*
 * A transaction with many lease changes gets an index from each lease to its
 * releases and renewals, so each call stays O(1) instead of scanning them all.
 */
#define OP_INDEX_MIN		16

typedef struct OpIndexKey
{
	DLockKey	key;
	DLockOwner	owner;
} OpIndexKey;

typedef struct OpIndexEntry
{
	OpIndexKey	k;				/* hash key: must be first */
	List	   *ops;
} OpIndexEntry;

static HTAB *op_index = NULL;	/* in TopTransactionContext, or NULL */

/*
 * Each name's latest fence pin of the transaction, so a bulk write through
 * the fencing trigger fences (logs an op and pins) once per name and token,
 * not once per row, and finds its token in O(1).
 */
typedef struct FenceEntry
{
	DLockKey	key;			/* hash key (token 0): must be first */
	DLockOp    *op;				/* its live FENCE op, or NULL */
} FenceEntry;

static HTAB *fence_index = NULL;	/* in TopTransactionContext, or NULL */

static FenceEntry *
fence_entry(const DLockKey *key, HASHACTION action)
{
	DLockKey	k;
	FenceEntry *entry;
	bool		found;

	if (fence_index == NULL)
	{
		HASHCTL		ctl;

		if (action == HASH_FIND)
			return NULL;
		ctl.keysize = sizeof(DLockKey);
		ctl.entrysize = sizeof(FenceEntry);
		ctl.hcxt = TopTransactionContext;
		fence_index = hash_create("dlock fences", 16, &ctl,
								  HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	memcpy(&k, key, sizeof(DLockKey));
	k.token = 0;
	entry = hash_search(fence_index, &k, action, &found);
	if (entry != NULL && !found)
		entry->op = NULL;
	return entry;
}

static void
index_key(OpIndexKey *k, const DLockKey *key, const DLockOwner *owner)
{
	memset(k, 0, sizeof(OpIndexKey));
	memcpy(&k->key, key, sizeof(DLockKey));
	k->owner.len = owner->len;
	memcpy(k->owner.str, owner->str, owner->len);
}

static void
index_add(DLockOp *op)
{
	OpIndexKey	k;
	OpIndexEntry *entry;
	bool		found;

	if (op->kind != DLOCK_OP_RELEASE && op->kind != DLOCK_OP_RENEW)
		return;
	index_key(&k, &op->key, &op->owner);
	entry = hash_search(op_index, &k, HASH_ENTER, &found);
	if (!found)
		entry->ops = NIL;
	entry->ops = lappend(entry->ops, op);
}

static void
index_remove(DLockOp *op)
{
	OpIndexKey	k;
	OpIndexEntry *entry;

	index_key(&k, &op->key, &op->owner);
	entry = hash_search(op_index, &k, HASH_FIND, NULL);
	if (entry != NULL)
		entry->ops = list_delete_ptr(entry->ops, op);
}

static void
build_index(void)
{
	HASHCTL		ctl;
	ListCell   *lc;

	ctl.keysize = sizeof(OpIndexKey);
	ctl.entrysize = sizeof(OpIndexEntry);
	ctl.hcxt = TopTransactionContext;
	op_index = hash_create("dlock transaction ops", 256, &ctl,
						   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	foreach(lc, ops)
		index_add(lfirst(lc));
}

/* The ops that may concern req's lease: a superset; filter with same_lease. */
static List *
lease_ops(const DLockRequest *req)
{
	OpIndexKey	k;
	OpIndexEntry *entry;

	if (op_index == NULL)
		return ops;
	index_key(&k, &req->key, &req->owner);
	entry = hash_search(op_index, &k, HASH_FIND, NULL);
	return entry != NULL ? entry->ops : NIL;
}

static bool
same_lease(const DLockOp *op, const DLockRequest *req)
{
	return op->hash == req->hash &&
		op->key.dbid == req->key.dbid &&
		op->key.len == req->key.len &&
		memcmp(op->key.name, req->key.name, op->key.len) == 0 &&
		dlock_owner_equal(&op->owner, &req->owner);
}

static DLockOp *
log_op(DLockOpKind kind, const DLockRequest *req, uint64 token)
{
	DLockOp    *op;
	MemoryContext oldcxt = MemoryContextSwitchTo(TopTransactionContext);

	op = palloc0(sizeof(DLockOp));
	op->kind = kind;
	op->level = GetCurrentTransactionNestLevel();
	memcpy(&op->key, &req->key, sizeof(DLockKey));
	op->hash = req->hash;
	memcpy(&op->owner, &req->owner, offsetof(DLockOwner, str) + req->owner.len);
	op->token = token;
	op->mode = (uint8) req->mode;
	ops = lappend(ops, op);
	if (op_index != NULL)
		index_add(op);
	else if (list_length(ops) > OP_INDEX_MIN)
		build_index();
	MemoryContextSwitchTo(oldcxt);
	return op;
}

/*
 * A lease change about to be made: logged first, as logging allocates, so
 * that nothing can fail between the change in shared memory and its record
 * here.  Until completed it has no effect; dlock_xact_forget() drops it.
 */
DLockOp    *
dlock_xact_begin(const DLockRequest *req)
{
	DLockOp    *op = log_op(DLOCK_OP_RENEW, req, 0);

	op->lifetime = req->lifetime;
	return op;
}

/* The op was not needed (nothing was granted or extended). */
void
dlock_xact_forget(DLockOp *op)
{
	Assert(op->token == 0);
	if (op_index != NULL)
		index_remove(op);
	if (llast(ops) == op)
		ops = list_delete_last(ops);
}

/*
 * The op became a new grant of token: an abort takes it back; a commit of a
 * durable one lets other sessions act on the lease without waiting for our
 * transaction.
 */
void
dlock_xact_granted(DLockOp *op, uint64 token, bool durable)
{
	if (op_index != NULL)
		index_remove(op);
	op->kind = DLOCK_OP_ACQUIRE;
	op->token = token;
	op->durable = durable;
}

/* The granted op's event (seq 0: none), sent at commit. */
void
dlock_xact_granted_event(DLockOp *op, uint64 seq)
{
	op->event_seq = seq;
}

/* The granted op also deleted the rows of the name's ended leases. */
void
dlock_xact_cleared_rows(DLockOp *op)
{
	op->clears = true;
}

/*
 * The op became an extension of the caller's lease, pinned by the caller,
 * to expires at commit.  Taking the lease again cancels a release still
 * pending; returns true when that release deleted the lease's row, which
 * the caller must then write again.
 */
bool
dlock_xact_extended(DLockOp *op, const DLockRequest *req, uint64 token,
					int64 expires)
{
	ListCell   *lc;
	bool		row_deleted = false;

	op->token = token;
	op->expires = expires;
	foreach(lc, lease_ops(req))
	{
		DLockOp    *prev = lfirst(lc);

		if (prev->kind == DLOCK_OP_RELEASE && prev->superseded_by == NULL &&
			prev->token == token && same_lease(prev, req))
		{
			prev->superseded_by = op;
			op->supersedes = true;
			row_deleted |= prev->durable;
		}
	}
	return row_deleted;
}

bool
dlock_xact_release_pending(const DLockRequest *req)
{
	ListCell   *lc;

	foreach(lc, lease_ops(req))
	{
		DLockOp    *op = lfirst(lc);

		if (op->kind == DLOCK_OP_RELEASE && op->superseded_by == NULL &&
			same_lease(op, req))
			return true;
	}
	return false;
}

/*
 * Whether this transaction releases the lease with token (a release or a
 * force release, pending): a fence of it must not write its row.  Only a
 * fence of a deferred lease asks, so a walk of every op will do.
 */
bool
dlock_xact_releases(const DLockKey *key, uint64 token)
{
	ListCell   *lc;

	foreach(lc, ops)
	{
		DLockOp    *op = lfirst(lc);

		if (op->kind == DLOCK_OP_RELEASE && op->superseded_by == NULL &&
			op->token == token && op->key.dbid == key->dbid)
			return true;
	}
	return false;
}

void
dlock_xact_release(const DLockRequest *req, uint64 token, bool durable,
				   bool marked)
{
	DLockOp    *op = log_op(DLOCK_OP_RELEASE, req, token);

	op->durable = durable;
	op->marked = marked;
}

/*
 * A force release of the lease of req (its holder's), token (its event says
 * "forced"): false when a release of it that ends it at once is pending
 * already.  One pending within
 * its minimum hold would only end it at the hold's end: the force release
 * supersedes it, so the lease ends at commit all the same (a savepoint
 * rolled back over the force release gives that release back).
 */
bool
dlock_xact_force_release(const DLockRequest *req, uint64 token, bool durable,
						 bool marked)
{
	ListCell   *lc;
	DLockOp    *within_hold = NULL;
	DLockOp    *op;

	foreach(lc, lease_ops(req))
	{
		DLockOp    *prev = lfirst(lc);

		if (prev->kind == DLOCK_OP_RELEASE && prev->superseded_by == NULL &&
			same_lease(prev, req))
		{
			if (prev->expires == 0)
				return false;
			within_hold = prev;
		}
	}
	op = log_op(DLOCK_OP_RELEASE, req, token);
	op->durable = durable;
	op->marked = marked;
	op->forced = true;
	if (within_hold != NULL)
	{
		within_hold->superseded_by = op;
		op->supersedes = true;
	}
	return true;
}

/*
 * A release within the lease's minimum hold: at commit the lease ends at
 * expires instead, marked released (its row, if any, was updated to version).
 */
void
dlock_xact_release_hold(const DLockRequest *req, uint64 token, int64 expires,
						int64 version, TimestampTz released_at)
{
	DLockOp    *op = log_op(DLOCK_OP_RELEASE, req, token);

	op->expires = expires;
	op->version = version;
	op->released_at = released_at;
}

DLockOp    *
dlock_xact_renew(const DLockRequest *req)
{
	DLockOp    *op = log_op(DLOCK_OP_RENEW, req, 0);

	op->renewal = true;
	return op;
}

/* A fence about to pin a lease: completed by dlock_xact_fence_set(). */
DLockOp    *
dlock_xact_fence(const DLockRequest *req)
{
	/* the name's entry is made now: completing the op must not allocate */
	(void) fence_entry(&req->key, HASH_ENTER);
	return log_op(DLOCK_OP_FENCE, req, 0);
}

void
dlock_xact_fence_set(DLockOp *op, uint64 token)
{
	FenceEntry *entry = fence_entry(&op->key, HASH_FIND);

	op->token = token;
	entry->op = op;
}

/* The token this transaction last fenced name with, or 0. */
uint64
dlock_xact_fenced_token(const DLockKey *key)
{
	FenceEntry *entry = fence_entry(key, HASH_FIND);

	return entry != NULL && entry->op != NULL ? entry->op->token : 0;
}

/* Whether this transaction holds a fence pin on the name's lease token. */
bool
dlock_xact_fence_held(const DLockKey *key, uint64 token)
{
	return dlock_xact_fenced_token(key) == token;
}

/* A fence op was undone: the name's latest fence is an earlier one, if any. */
static void
fence_undone(DLockOp *op, int before)
{
	FenceEntry *entry = fence_entry(&op->key, HASH_FIND);

	if (entry == NULL || entry->op != op)
		return;
	entry->op = NULL;
	for (int i = before - 1; i >= 0; i--)
	{
		DLockOp    *prev = list_nth(ops, i);

		if (prev->kind == DLOCK_OP_FENCE && prev->token != 0 &&
			prev->key.dbid == op->key.dbid && prev->key.len == op->key.len &&
			memcmp(prev->key.name, op->key.name, op->key.len) == 0)
		{
			entry->op = prev;
			break;
		}
	}
}

/* Whether this transaction pins any lease (renewed, extended or fenced it). */
bool
dlock_xact_holds_pins(void)
{
	ListCell   *lc;

	foreach(lc, ops)
	{
		DLockOp    *op = lfirst(lc);

		if ((op->kind == DLOCK_OP_RENEW || op->kind == DLOCK_OP_FENCE) && op->token != 0)
			return true;
	}
	return false;
}

/*
 * The op writes the row of a deferred lease it pins, adopted by xid
 * (dlock_adopt): the commit lets others act on the lease again, an abort
 * makes it deferred again.
 */
void
dlock_xact_adopted(DLockOp *op, TransactionId xid)
{
	op->adopted = xid;
}

void
dlock_xact_renew_set(DLockOp *op, uint64 token, int64 expires, int64 version)
{
	op->token = token;
	op->expires = expires;
	op->version = version;
}

/* A subtransaction that took a lease again was undone: its release stands. */
static void
undo_supersede(DLockOp *op)
{
	DLockRequest req;
	ListCell   *lc;

	memcpy(&req.key, &op->key, sizeof(DLockKey));
	req.hash = op->hash;
	memcpy(&req.owner, &op->owner, sizeof(DLockOwner));
	foreach(lc, lease_ops(&req))
	{
		DLockOp    *prev = lfirst(lc);

		if (prev->superseded_by == op)
			prev->superseded_by = NULL;
	}
}

/*
 * Drops, newest first, every op made at nesting level >= level: a new grant
 * is taken back, a pin is dropped, a deferred lease's release gives the
 * lease back to others, and nothing else reaches shared memory.
 * Levels never decrease along the list (an ended subtransaction's ops move
 * to its parent's level), so those ops are its tail.
 */
static void
undo_from(int level)
{
	int			i = list_length(ops) - 1;

	for (; i >= 0; i--)
	{
		DLockOp    *op = list_nth(ops, i);

		if (op->level < level)
			break;
		if (op->kind == DLOCK_OP_ACQUIRE)
		{
			/* a grant taken back, of any lifetime: no end of it is sent */
			dlock_handoff_free(&op->key, op->hash, op->token, true);
			if (op->event_seq != 0)
				dlock_events_undone(&op->key, op->token);
		}
		else if ((op->kind == DLOCK_OP_RENEW || op->kind == DLOCK_OP_FENCE) &&
				 op->token != 0)
		{
			/* before the unpin, which may end the lease */
			if (TransactionIdIsValid(op->adopted))
				dlock_handoff_unadopt(&op->key, op->hash, op->token);
			dlock_handoff_set_expiry(&op->key, op->hash, op->token, 0, 0);
			if (op->kind == DLOCK_OP_FENCE)
				fence_undone(op, i);
		}
		else if (op->kind == DLOCK_OP_RELEASE && op->marked)
			dlock_handoff_unmark(&op->key, op->hash, op->token);
		if (op->supersedes)
			undo_supersede(op);
		if (op_index != NULL)
			index_remove(op);
	}
	ops = list_truncate(ops, i + 1);
}

/*
 * Applies the transaction's renewals, extensions and releases, in the order
 * they were made.  A durable lease takes an expiry only from a row version
 * newer than the one it has: another session's renewal of the same lease
 * that committed later (with a later version) wins, whichever commit
 * callback runs first.
 */
static void
apply_commit(void)
{
	ListCell   *lc;

	foreach(lc, ops)
	{
		DLockOp    *op = lfirst(lc);

		if (op->token == 0)
			continue;
		if (op->kind == DLOCK_OP_ACQUIRE && (op->durable || op->clears))
			dlock_grant_committed(&op->key, op->hash, op->token);
		else if (op->kind == DLOCK_OP_RENEW)
		{
			dlock_handoff_set_expiry(&op->key, op->hash, op->token, op->expires,
									 op->version);
			if (op->renewal)
				dlock_count(DLOCK_STAT_RENEWALS);
		}
		else if (op->kind == DLOCK_OP_FENCE)
			dlock_handoff_set_expiry(&op->key, op->hash, op->token, 0, 0);
		else if (op->kind == DLOCK_OP_RELEASE && op->superseded_by == NULL)
		{
			/* a release within the hold is counted when the hold ends */
			if (op->expires != 0)
				dlock_handoff_hold(&op->key, op->hash, op->token, op->expires,
								   op->version, op->released_at);
			else
			{
				dlock_handoff_free(&op->key, op->hash, op->token, op->durable);
				dlock_count(DLOCK_STAT_RELEASES);
			}
		}
		/* a row it wrote for a deferred lease is the lease's now */
		if (TransactionIdIsValid(op->adopted))
			dlock_grant_committed(&op->key, op->hash, op->token);
	}
	/* the transaction's own leases end with it, once it has done the rest */
	foreach(lc, ops)
	{
		DLockOp    *op = lfirst(lc);

		if (op->kind == DLOCK_OP_ACQUIRE && op->token != 0 &&
			op->lifetime == DLOCK_LIFETIME_TRANSACTION)
			dlock_lifetime_end(&op->key, op->hash, op->token);
	}
}

/*
 * A prepared transaction outlives its session and would keep its
 * transaction leases with no one to end them: refused, naming one.
 */
static void
refuse_prepare(void)
{
	ListCell   *lc;

	foreach(lc, ops)
	{
		DLockOp    *op = lfirst(lc);

		if (op->kind == DLOCK_OP_ACQUIRE && op->token != 0 &&
			op->lifetime == DLOCK_LIFETIME_TRANSACTION)
			ereport(ERROR,
					(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
					 errmsg("cannot prepare a transaction that holds a dlock lease of lifetime 'transaction'"),
					 errdetail("It holds lease \"%.*s\", which ends with it; a prepared transaction outlives its session.",
							   op->key.len, op->key.name),
					 errhint("End the transaction with COMMIT or ROLLBACK: a transaction that takes dlock leases cannot be prepared.")));
	}
	if (ops != NIL)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot prepare a transaction that acquired, renewed or released dlock leases")));
}

/*
 * Records the events of the transaction's grants and of the releases it
 * applies, in the order they were made (events.c), once it has committed
 * and before it applies them.  Nothing here can fail.
 */
static void
commit_events(void)
{
	ListCell   *lc;
	int			n = 0;

	foreach(lc, ops)
	{
		DLockOp    *op = lfirst(lc);

		n += (op->token != 0 &&
			  ((op->kind == DLOCK_OP_ACQUIRE && op->event_seq != 0) ||
			   (op->kind == DLOCK_OP_RELEASE && op->superseded_by == NULL &&
				op->expires == 0)));
	}
	if (n == 0)
		return;
	dlock_events_commit_begin(n);
	foreach(lc, ops)
	{
		DLockOp    *op = lfirst(lc);

		if (op->token == 0)
			continue;
		if (op->kind == DLOCK_OP_ACQUIRE && op->event_seq != 0)
			dlock_events_commit_grant(&op->key, op->hash, &op->owner, op->token,
									  op->event_seq, (DLockMode) op->mode,
									  dlock_lifetime_name((DLockLifetime) op->lifetime));
		else if (op->kind == DLOCK_OP_RELEASE && op->superseded_by == NULL &&
				 op->expires == 0)
			dlock_events_commit_end(&op->key, op->hash, op->token, op->forced);
	}
}

static void
xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			/* events off (no lease ever had them): one flag test */
			if (ops != NIL && dlock_events_in_use())
				commit_events();
			apply_commit();
			ops = NIL;
			op_index = NULL;	/* freed with TopTransactionContext */
			fence_index = NULL;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			undo_from(0);
			if (ops != NIL && dlock_events_in_use())
				dlock_events_aborted();
			ops = NIL;
			op_index = NULL;
			fence_index = NULL;
			break;
		case XACT_EVENT_PRE_PREPARE:
			refuse_prepare();
			break;
		default:
			break;
	}
}

static void
subxact_callback(SubXactEvent event, SubTransactionId mySubid,
				 SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();

	if (ops == NIL)
		return;
	if (event == SUBXACT_EVENT_ABORT_SUB)
		undo_from(level);
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		/* the subtransaction's ops are the tail: hand them to the parent */
		for (int i = list_length(ops) - 1; i >= 0; i--)
		{
			DLockOp    *op = list_nth(ops, i);

			if (op->level < level)
				break;
			op->level = level - 1;
		}
	}
}

void
dlock_xact_register(void)
{
	dlock_wake_init();
	if (registered)
		return;
	RegisterXactCallback(xact_callback, NULL);
	RegisterSubXactCallback(subxact_callback, NULL);
	registered = true;
}
