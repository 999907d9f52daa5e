/*
 * dlock_fuzz.c
 *		Concurrent fuzz client for dlock, and a waiter herd for exhaustion
 *		tests.  See fuzz.md in this directory.
 *
 * Fuzz mode (default) forks client processes.  Each connects to a random
 * database as a random role and, until the time is up, issues random dlock
 * calls with random and mostly hostile arguments (NULLs, empty and oversized
 * names and owners, control characters, invalid UTF-8, zero, negative,
 * microsecond and enormous intervals, odd tokens), alone or inside
 * transactions with savepoints, rollbacks and PREPARE TRANSACTION, while
 * changing its settings, cancelling its own calls, hanging up while queued,
 * terminating other clients' backends, and now and then flooding the lease
 * table.  A monitor process samples dlock_locks meanwhile.
 *
 * Every returned token is recorded with the holder it was returned to
 * (database, name, owner, role) and the client's clock before and after the
 * call.  At the end the checker requires:
 *   - no SQLSTATE outside the expected set (an internal error, XX000, is a
 *     bug), and no client hung;
 *   - one token, one holder: a token is never returned to two holders, and
 *     dlock_locks never shows two rows for a name or a token on two names;
 *   - tokens grow: a token that a call certainly got as a new grant is above
 *     every token any client had received before that call was sent (for a
 *     holder with a queued request, dlock_enqueue, before the first call that
 *     may have queued it: its grant came in another backend, meanwhile);
 *   - no stale write: an UPDATE of fz_rows that does not set the token
 *     column, sent where nothing fenced (alone, or in a transaction that
 *     sent no fence), is refused; none changed a row, and no row it marks
 *     (stale = true) is in fz_rows at the end;
 *   - quiescence: dlock_waiters empty and dlock_stats.waiting 0 in every
 *     database, once the queued requests left over (pid NULL) were dequeued
 *     by the checker (dlock_dequeue as a superuser), and dlock_stats.queued
 *     0 then; every durable live lease has its row (same token, owner,
 *     role and version) and every row that claims a live lease has it in
 *     shared memory; the sentinel lease taken before the start is unchanged;
 *   - a fresh grant after the run is above every token seen;
 *   - session and transaction leases (grant calls also ask for lifetimes
 *     and minimum holds) have no row, end with their backend (monitor and
 *     quiescence) and their transaction (the client looks right after it
 *     ended), and durable holds agree with dlock_lease_holds;
 *   - change events (some sessions set dlock.events; a listener records
 *     the stream) agree with one another and with what the clients know:
 *     see check_events(), and --self-test.
 * With --snapshot FILE it writes the durable live leases (with their holds)
 * and leaves session and transaction leases held; after a restart, --verify
 * FILE checks the durable ones all came back, with their holds, and nothing
 * else did.
 *
 * Herd mode (--herd N) queues N sessions on one name held by the tool and
 * then, by --herd-mode: "chain" releases the name and has each waiter release
 * on grant (all must be granted, in queue order, by growing tokens);
 * "timeout" lets every waiter run into statement_timeout while the holder
 * keeps the name; "storm" mixes short statement_timeouts, own timeouts,
 * cancels, hang-ups and terminations, then releases: the survivors must be
 * granted in queue order.  Afterwards nothing may be left queued.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "loadlib.h"

#define MAX_CLIENTS		64
#define MAX_DBS			8
#define MAX_ROLES		8
#define MAX_TRACKED		64		/* tracked names n0 .. n<names-1> */
#define OWNERS_PER		3		/* private owners of each client */
#define MAX_CODES		64		/* distinct SQLSTATEs counted per client */
#define RECORDS_PER		(1 << 19)	/* token records per process */
#define MAX_PRINTED		30		/* unexpected errors printed, in all */
#define EVTOKS_PER		(1 << 16)	/* tokens tagged for the event check, per client */
#define MAX_EVENTS		(1 << 21)	/* change events the listener keeps */
#define MAX_PENDING		32		/* new grants of one open transaction, tracked */

/* ------------------------------------------------------------------ options */

/* -d, -c, -t, -s and -n (how many tracked names) */
static LoadOptions opts = {.conninfo = "", .clients = 12, .seconds = 20, .seed = 1, .names = 48};
static char *db_list[MAX_DBS];
static int	ndbs = 0;
static char *role_list[MAX_ROLES];
static int	nroles = 0;
static bool verbose = false;
static const char *snapshot_file = NULL;
static const char *verify_file = NULL;
static int	stmt_timeout_max_ms = 500;
static bool inject = false;		/* --inject-violations: the checker must fail */

static int	herd = 0;
static const char *herd_name = "herd";
static const char *herd_mode = "chain";
static int	herd_timeout_ms = 300;

/* ------------------------------------------------------------------ shared */

typedef struct Record
{
	int64_t		token;
	int64_t		t_send;
	int64_t		t_recv;
	uint64_t	holder;			/* hash of database, name, owner, role */
	uint8_t		fresh;			/* certainly granted during this call */
	uint8_t		kind;			/* 0 call, 1 monitor snapshot, 2 final */
} Record;

typedef struct Code
{
	char		code[6];
	long		n;
} Code;

typedef struct Stats
{
	long		calls;			/* statements sent */
	long		dlock_calls;	/* dlock function calls among them */
	long		ok;
	long		errors;
	long		unexpected;
	long		grants;			/* tokens returned */
	long		fresh;			/* ... certainly new grants */
	long		nulls;			/* try/acquire returned NULL */
	long		xacts;
	long		rollbacks;
	long		savepoint_rollbacks;
	long		prepares;
	long		cancels;
	long		hangups;
	long		terminations;
	long		reconnects;
	long		floods;
	long		hostile_names;
	long		big_args;		/* 1 MB names or owners */
	long		stale_sent;		/* unfenced UPDATEs that set no token */
	long		stale_refused;	/* ... refused with DL001 */
	long		stale_no_row;	/* ... that matched no row */
	long		lt_session;		/* tokens of grant calls asking lifetime 'session' */
	long		lt_xact;		/* ... 'transaction' */
	long		lt_default_session; /* ... the session's own owner, no lifetime */
	long		min_holds;		/* tokens of grant calls with a min_hold */
	long		xact_checks;	/* transaction leases looked for after their end */
	long		events_on;		/* SET dlock.events = on that succeeded */
	long		ev_known;		/* committed new grants of events sessions (TAG_K) */
	long		ev_uncertain;	/* grant calls of events sessions with an unknown outcome */
	long		ev_rolled_back; /* new grants rolled back (TAG_R) */
	long		ev_off;			/* new grants of sessions with events off (TAG_OFF) */
	long		enqueues;		/* dlock_enqueue calls */
	long		enqueue_nulls;	/* ... that returned NULL: a request queued */
	long		queued_tokens;	/* tokens to holders with a request queued */
	long		dequeues;		/* dlock_dequeue calls */
	long		dequeued;		/* ... that returned true */
	long		leftover_queued;	/* queued requests the checker dequeued */
	long		violations;
	int			finished;
	int			pid;			/* backend pid of the main connection */
	int			nrecords;
	int			nevtoks;
	int			ncodes;
	Code		codes[MAX_CODES];
} Stats;

/*
 * What a client knows of a grant it got certainly new, for the event check:
 * TAG_K committed in a session with dlock.events on (its "granted" event
 * must arrive, with the lifetime asked for), TAG_R rolled back (no event
 * ever), TAG_OFF granted in a session with dlock.events off (no event ever).
 */
enum
{
	TAG_K, TAG_R, TAG_OFF
};

/* lifetimes as events and dlock_locks name them */
enum
{
	LT_TTL, LT_SESSION, LT_XACT, LT_UNKNOWN
};
static const char *const lifetime_names[] = {"ttl", "session", "transaction", "?"};

typedef struct EvTok
{
	int64_t		token;
	uint8_t		db;
	uint8_t		tag;
	uint8_t		lifetime;		/* TAG_K: the lifetime asked for */
} EvTok;

/* One change event, as the listener parsed it. */
enum
{
	EV_GRANTED, EV_RELEASED, EV_FORCED, EV_EXPIRED, EV_ENDED, EV_LOST, EV_BAD
};
static const char *const event_names[] = {"granted", "released", "forced", "expired", "ended", "lost", "?"};

typedef struct Event
{
	int64_t		token;
	int64_t		seq;
	uint64_t	name;			/* hash of the database and the name's JSON text */
	int64_t		lost;			/* EV_LOST: its count */
	int32_t		arrival;		/* order of arrival, all databases */
	int16_t		client;			/* a client's private owner: its id; else -1 */
	uint8_t		db;
	uint8_t		kind;
	uint8_t		lifetime;
	uint8_t		shared;			/* mode "shared" */
	uint8_t		tracked;		/* the name is a tracked one (n0..) */
} Event;

typedef struct Listen
{
	int			ready;
	int			stop;
	int			nevents;
	int			lost_conn;		/* a LISTEN connection failed */
	int			malformed;
	char		bad_payload[200];
} Listen;

static unsigned run_nonce;		/* private owners differ from any earlier run's */
static Stats *stats;			/* [MAX_CLIENTS + 1]; the last is the monitor */
static Record *records;			/* [MAX_CLIENTS + 1][RECORDS_PER] */
static EvTok *evtoks;			/* [MAX_CLIENTS][EVTOKS_PER] */
static Event *events;			/* [MAX_EVENTS] */
static Listen *listen_state;
static int *printed;

/* ------------------------------------------------------------------ helpers */

static uint64_t rng_state;		/* this process's random numbers */

static uint64_t
rnd(void)
{
	return load_splitmix64(&rng_state);
}

static int
rnd_int(int n)
{
	return load_splitmix_int(&rng_state, n);
}

/* true with probability pct percent */
static bool
chance(double pct)
{
	return (double) (rnd() % 1000000) < pct * 10000.0;
}

static uint64_t
fnv(uint64_t h, const void *data, size_t len)
{
	const unsigned char *p = data;

	for (size_t i = 0; i < len; i++)
	{
		h ^= p[i];
		h *= UINT64_C(0x100000001b3);
	}
	return h;
}

static uint64_t
holder_hash(const char *db, const char *name, size_t name_len,
			const char *owner, size_t owner_len, const char *role)
{
	uint64_t	h = UINT64_C(0xcbf29ce484222325);
	uint32_t	len;

	len = (uint32_t) strlen(db);
	h = fnv(h, &len, sizeof(len));
	h = fnv(h, db, len);
	len = (uint32_t) name_len;
	h = fnv(h, &len, sizeof(len));
	h = fnv(h, name, name_len);
	len = (uint32_t) owner_len;
	h = fnv(h, &len, sizeof(len));
	h = fnv(h, owner, owner_len);
	len = (uint32_t) strlen(role);
	h = fnv(h, &len, sizeof(len));
	return fnv(h, role, len);
}

static void
split_list(char *arg, char **out, int *n, int max)
{
	char	   *save = NULL;

	for (char *t = strtok_r(arg, ",", &save); t != NULL && *n < max; t = strtok_r(NULL, ",", &save))
		out[(*n)++] = t;
}

/*
 * Connects with the checker's connection string, overriding the database
 * and the user when given.
 */
static PGconn *
connect_as(const char *db, const char *role, const char *appname)
{
	return load_connect(opts.conninfo, db, role, appname);
}

/* A connection for the checker, as the conninfo's user; exits on failure. */
static PGconn *
checker_conn(const char *db)
{
	PGconn	   *conn = connect_as(db, NULL, "dlock_fuzz checker");

	if (PQstatus(conn) != CONNECTION_OK)
	{
		fprintf(stderr, "dlock_fuzz: cannot connect to %s: %s", db ? db : "(default)",
				PQerrorMessage(conn));
		exit(2);
	}
	return conn;
}

/* ------------------------------------------------------------------ values */

/*
 * Interval texts.  The first ones are what a well-behaved caller sends;
 * the rest are hostile.  The extreme ones are the largest and smallest
 * intervals PostgreSQL 15 has.
 */
static const char *const hostile_intervals[] = {
	"0", "-1 microsecond", "1 microsecond", "0.4 microseconds", "7 days",
	"7 days 0.000001 seconds", "168:00:00", "1 mon", "1 mon -23 days",
	"-1 mon 31 days", "1 mon -30 days", "1000 years", "-1000 years",
	"178956970 years 7 months 2147483647 days 2562047788 hours 54.775807 seconds",
	"-178956970 years -8 months -2147483648 days -2562047788 hours -54.775808 seconds",
	"2562047788:00:54.775807", "-2562047788 hours -54.775808 seconds",
	"-2147483648 days", "2147483647 days", "-178956970 years -8 months",
	"P1D", "PT0.5S", "garbage", "infinity", "1e400 seconds", "  5 s  ",
	"@ 1 hour ago", "1 day -86400.000001 seconds",
};
#define N_HOSTILE_INTERVALS (int) (sizeof(hostile_intervals) / sizeof(hostile_intervals[0]))

typedef struct Arg
{
	char	   *v;				/* NULL: SQL NULL */
	size_t		len;
	bool		owned;			/* free() it */
} Arg;

static void
arg_set(Arg *a, const char *s)
{
	a->v = (char *) s;
	a->len = s ? strlen(s) : 0;
	a->owned = false;
}

static void
arg_fmt(Arg *a, const char *fmt,...)
{
	va_list		ap;
	char		buf[256];

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	a->v = strdup(buf);
	a->len = strlen(a->v);
	a->owned = true;
}

static void
arg_free(Arg *a)
{
	if (a->owned)
		free(a->v);
	a->v = NULL;
	a->owned = false;
}

/* Random text of len bytes, none NUL; printable unless ctl. */
static char *
random_text(size_t len, bool ctl)
{
	char	   *s = malloc(len + 1);

	for (size_t i = 0; i < len; i++)
		s[i] = ctl ? (char) (1 + rnd_int(126)) : (char) (' ' + rnd_int(95));
	s[len] = '\0';
	return s;
}

static char *
repeat_str(const char *unit, int n, const char *tail)
{
	size_t		ul = strlen(unit),
				tl = strlen(tail);
	char	   *s = malloc(ul * n + tl + 1);

	for (int i = 0; i < n; i++)
		memcpy(s + ul * i, unit, ul);
	memcpy(s + ul * n, tail, tl + 1);
	return s;
}

static void
arg_own(Arg *a, char *s)
{
	a->v = s;
	a->len = strlen(s);
	a->owned = true;
}

/* ------------------------------------------------------------------ client */

typedef struct Tracked
{
	int64_t		token;			/* last token this client got for the holder */
	bool		uncertain;		/* a reply was lost: the next token may be old */
	bool		touched;		/* in the open transaction */

	/*
	 * Send time of the first dlock_enqueue that may have queued a request for
	 * the holder since it last got a token (0: none): a token it gets next
	 * may be that request's, granted by another backend after that call.
	 */
	int64_t		queued_send;
} Tracked;

typedef struct Client
{
	int			id;
	Stats	   *st;
	Record	   *rec;
	PGconn	   *conn;
	int			db;
	int			role;
	char		session_owner[160];	/* dlock_owner() as the session knows it */
	bool		owner_known;
	bool		in_xact;
	bool		xact_failed;
	bool		savepoint;
	int			xact_dlock_ops;
	bool		xact_fenced;	/* sent something that may fence: a stale
								 * write here may be legitimate */
	char		last_code[6];	/* SQLSTATE of the last error */
	int			gid;
	int			flood;
	bool		events;			/* dlock.events is on */
	/* new grants of the open transaction, judged at its end */
	int			npending;
	struct
	{
		int64_t		token;
		uint8_t		lifetime;
		bool		after_savepoint;
		bool		events;
	}			pending[MAX_PENDING];
	bool		pending_lost;	/* more than MAX_PENDING of them */
	/* tokens of transaction leases of the open transaction */
	int			nxact_leases;
	int64_t		xact_leases[MAX_PENDING];
	PGconn	   *observer[MAX_DBS];	/* looks for them once it ended */
	char		owners[OWNERS_PER][32];
	/* [db][role][name][owner] */
	Tracked		tracked[MAX_DBS][MAX_ROLES][MAX_TRACKED][OWNERS_PER];
} Client;

static Client *me;

static void
count_code(Client *c, const char *code)
{
	for (int i = 0; i < c->st->ncodes; i++)
	{
		if (strcmp(c->st->codes[i].code, code) == 0)
		{
			c->st->codes[i].n++;
			return;
		}
	}
	if (c->st->ncodes < MAX_CODES)
	{
		snprintf(c->st->codes[c->st->ncodes].code, 6, "%s", code);
		c->st->codes[c->st->ncodes++].n = 1;
	}
}

/*
 * SQLSTATEs a hostile caller may legitimately get from sql.  Anything else
 * (above all XX000, an internal error) is reported and fails the run.
 */
static bool
expected_code(const char *code, const char *sql)
{
	static const char *const ok[] = {
		"22004",				/* null argument */
		"22023",				/* bad name, owner, ttl or timeout */
		"22P02",				/* invalid text for bigint */
		"22003",				/* bigint out of range */
		"22007",				/* invalid interval syntax */
		"22008",				/* interval field out of range */
		"22015",				/* interval field overflow */
		"22021",				/* invalid UTF-8 */
		"57014",				/* statement_timeout or cancel */
		"53200",				/* lease table full */
		"DL001",				/* fencing */
		"42501",				/* not permitted */
		"25P02",				/* in a failed transaction */
		"25006",				/* read-only transaction */
		"0A000",				/* PREPARE TRANSACTION with dlock changes */
		"40001",				/* row kept changing */
		"40P01",				/* deadlock between lease-row writers */
		"57P01",				/* terminated by another client */
		"55P02",				/* SET of a setting that needs a reload */
		NULL
	};

	for (int i = 0; ok[i]; i++)
		if (strcmp(code, ok[i]) == 0)
			return true;

	/*
	 * A call with no timeout of its own (renew, release, force release,
	 * fence, a fenced write) that finds the lease still being granted by an
	 * open transaction when the lease expires fails with 55P03, as
	 * docs/semantics.md (Transactions) says.  An acquisition never does: it
	 * returns NULL at its timeout, and this client never sets lock_timeout.
	 */
	if (strcmp(code, "55P03") == 0)
		return strstr(sql, "dlock_try") == NULL && strstr(sql, "dlock_acquire") == NULL;
	return false;
}

static void
violation(Stats *st, const char *fmt,...)
{
	va_list		ap;

	st->violations++;
	if (__atomic_fetch_add(printed, 1, __ATOMIC_SEQ_CST) >= MAX_PRINTED)
		return;
	fprintf(stderr, "VIOLATION: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static void
add_record(Stats *st, Record *rec, int64_t token, int64_t t_send, int64_t t_recv,
		   uint64_t holder, bool fresh, int kind)
{
	Record	   *r;

	if (st->nrecords >= RECORDS_PER)
		return;
	r = &rec[st->nrecords];
	r->token = token;
	r->t_send = t_send;
	r->t_recv = t_recv;
	r->holder = holder;
	r->fresh = fresh;
	r->kind = (uint8_t) kind;
	__atomic_store_n(&st->nrecords, st->nrecords + 1, __ATOMIC_RELEASE);
}

/* Shows an argument for a report: its length, or its text if short. */
static void
show_arg(char *out, size_t outlen, const Arg *a)
{
	if (a->v == NULL)
		snprintf(out, outlen, "NULL");
	else if (a->len > 60)
		snprintf(out, outlen, "<%zu bytes>", a->len);
	else
	{
		size_t		o = 0;

		out[o++] = '\'';
		for (size_t i = 0; i < a->len && o + 6 < outlen; i++)
		{
			unsigned char ch = (unsigned char) a->v[i];

			if (ch < 32 || ch >= 127)
				o += snprintf(out + o, outlen - o, "\\x%02x", ch);
			else
				out[o++] = (char) ch;
		}
		out[o++] = '\'';
		out[o] = '\0';
	}
}

static void connect_client(Client *c);

/* The holders touched in the open transaction lose certainty. */
static void
forget_xact(Client *c, bool uncertain)
{
	for (int d = 0; d < ndbs; d++)
		for (int r = 0; r < nroles; r++)
			for (int n = 0; n < opts.names; n++)
				for (int o = 0; o < OWNERS_PER; o++)
				{
					Tracked    *t = &c->tracked[d][r][n][o];

					if (t->touched && uncertain)
						t->uncertain = true;
					t->touched = false;
				}
}

/* Tags a token for the event check (see EvTok). */
static void
add_evtok(Client *c, int64_t token, int tag, int lifetime)
{
	EvTok	   *e;

	if (c->st->nevtoks >= EVTOKS_PER)
	{
		if (tag == TAG_K)
			c->st->ev_uncertain++;	/* its event is still counted */
		return;
	}
	e = &evtoks[(size_t) c->id * EVTOKS_PER + c->st->nevtoks];
	e->token = token;
	e->db = (uint8_t) c->db;
	e->tag = (uint8_t) tag;
	e->lifetime = (uint8_t) lifetime;
	__atomic_store_n(&c->st->nevtoks, c->st->nevtoks + 1, __ATOMIC_RELEASE);
	if (tag == TAG_K)
		c->st->ev_known++;
	else if (tag == TAG_R)
		c->st->ev_rolled_back++;
	else
		c->st->ev_off++;
}

enum
{
	SETTLE_COMMITTED, SETTLE_ROLLED_BACK, SETTLE_UNKNOWN
};

/*
 * The open transaction ended: its new grants committed, rolled back, or
 * nobody knows (a lost reply).  Those of sessions with events off were
 * tagged when granted.
 */
static void
settle_pending(Client *c, int how)
{
	for (int i = 0; i < c->npending; i++)
	{
		if (!c->pending[i].events)
			continue;
		if (how == SETTLE_ROLLED_BACK)
			add_evtok(c, c->pending[i].token, TAG_R, 0);
		else if (how == SETTLE_COMMITTED)
			add_evtok(c, c->pending[i].token, TAG_K, c->pending[i].lifetime);
		else
			c->st->ev_uncertain++;
	}
	c->npending = 0;
}

/*
 * The open transaction ended (its COMMIT, ROLLBACK or PREPARE answered):
 * no transaction lease it took may be left bound to this backend, unless
 * kept, released, within its minimum hold.  Looked for from another
 * session.
 */
static void
check_xact_leases(Client *c)
{
	PGconn	  **o = &c->observer[c->db];

	for (int i = 0; i < c->nxact_leases && c->conn != NULL; i++)
	{
		char		tok[32],
					pid[16];
		const char *params[2] = {tok, pid};
		PGresult   *res;

		if (*o == NULL)
		{
			*o = connect_as(db_list[c->db], NULL, "dlock_fuzz observer");
			if (PQstatus(*o) != CONNECTION_OK)
			{
				PQfinish(*o);
				*o = NULL;
				break;			/* too many connections: not this time */
			}
		}
		snprintf(tok, sizeof(tok), "%" PRId64, c->xact_leases[i]);
		snprintf(pid, sizeof(pid), "%d", PQbackendPID(c->conn));
		res = PQexecParams(*o,
						   "SELECT format('lifetime %s, pid %s, released_at %s, min_hold %s, expires_at %s; now %s',"
						   " lifetime, pid, released_at, min_hold, expires_at, clock_timestamp())"
						   " FROM dlock_locks WHERE token = $1::bigint AND pid = $2::int"
						   " AND lifetime = 'transaction' AND (released_at IS NULL OR min_hold IS NULL)",
						   2, NULL, params, NULL, NULL, 0);
		if (PQresultStatus(res) != PGRES_TUPLES_OK)
		{
			PQclear(res);
			PQfinish(*o);
			*o = NULL;
			break;
		}
		c->st->xact_checks++;
		if (PQntuples(res) > 0)
			violation(c->st, "c%d: transaction lease token %s is still held after its transaction ended: %s",
					  c->id, tok, PQgetvalue(res, 0, 0));
		PQclear(res);
	}
	c->nxact_leases = 0;
}

typedef enum Outcome
{
	OUT_OK,
	OUT_ERROR,
	OUT_LOST					/* the connection is gone */
} Outcome;

/*
 * Sends one statement and waits for its result, perhaps cancelling it after
 * a random delay (cancel_us > 0) or hanging up meanwhile (hangup_us > 0).
 * On OUT_OK *res holds the result (caller clears it).
 */
static Outcome
exec(Client *c, const char *sql, int nparams, Arg *args, PGresult **res,
	 int cancel_us, int hangup_us, const char *what)
{
	const char *vals[8];
	int			lens[8];
	PGresult   *r,
			   *last = NULL;
	int64_t		t0 = load_now_us();
	bool		cancelled = false;

	*res = NULL;
	for (int i = 0; i < nparams; i++)
	{
		vals[i] = args[i].v;
		lens[i] = (int) args[i].len;
	}
	c->st->calls++;
	if (!PQsendQueryParams(c->conn, sql, nparams, NULL, vals, lens, NULL, 0))
	{
		connect_client(c);
		return OUT_LOST;
	}

	/* wait for the reply; cancel or hang up on the way if asked */
	for (;;)
	{
		struct pollfd pfd = {PQsocket(c->conn), POLLIN, 0};
		int			wait_ms = 100;
		int64_t		elapsed = load_now_us() - t0;

		if (!PQisBusy(c->conn))
			break;
		if (hangup_us > 0 && elapsed >= hangup_us)
		{
			c->st->hangups++;
			PQfinish(c->conn);
			c->conn = NULL;
			forget_xact(c, true);
			connect_client(c);
			return OUT_LOST;
		}
		if (cancel_us > 0 && !cancelled && elapsed >= cancel_us)
		{
			load_cancel(c->conn);
			cancelled = true;
			c->st->cancels++;
		}
		if (hangup_us > 0)
			wait_ms = (int) ((hangup_us - elapsed) / 1000) + 1;
		else if (cancel_us > 0 && !cancelled)
			wait_ms = (int) ((cancel_us - elapsed) / 1000) + 1;
		if (wait_ms > 100)
			wait_ms = 100;
		if (poll(&pfd, 1, wait_ms) < 0 && errno != EINTR)
			break;
		if (!PQconsumeInput(c->conn))
			break;
	}
	while ((r = PQgetResult(c->conn)) != NULL)
	{
		if (last)
			PQclear(last);
		last = r;
	}
	if (PQstatus(c->conn) != CONNECTION_OK)
	{
		if (last)
			PQclear(last);
		forget_xact(c, true);
		connect_client(c);
		return OUT_LOST;
	}
	if (last == NULL)
		return OUT_ERROR;
	if (load_ok(last))
	{
		c->st->ok++;
		*res = last;
		return OUT_OK;
	}
	else
	{
		const char *code = load_sqlstate(last, "?????");

		snprintf(c->last_code, sizeof(c->last_code), "%s", code);
		c->st->errors++;
		count_code(c, code);
		if (!expected_code(code, sql))
		{
			char		a[4][100];

			for (int i = 0; i < 4; i++)
				show_arg(a[i], sizeof(a[i]), i < nparams ? &args[i] : &(Arg) {0});
			c->st->unexpected++;
			violation(c->st, "c%d: unexpected SQLSTATE %s from %s: %s  in: %s  args: %s, %s, %s, %s",
					  c->id, code, what, PQresultErrorMessage(last), sql,
					  a[0], a[1], a[2], a[3]);
		}
		if (c->in_xact)
			c->xact_failed = true;
		PQclear(last);
		return OUT_ERROR;
	}
}

/* A statement whose result does not matter (only whether it succeeded). */
static Outcome
simple(Client *c, const char *sql)
{
	PGresult   *res;
	Outcome		out = exec(c, sql, 0, NULL, &res, 0, 0, "setup");

	if (out == OUT_OK)
		PQclear(res);
	return out;
}

static void
learn_owner(Client *c)
{
	PGresult   *res;

	c->owner_known = false;
	if (exec(c, "SELECT dlock_owner()", 0, NULL, &res, 0, 0, "dlock_owner") == OUT_OK)
	{
		if (PQntuples(res) == 1 && !PQgetisnull(res, 0, 0) &&
			strlen(PQgetvalue(res, 0, 0)) < sizeof(c->session_owner))
		{
			snprintf(c->session_owner, sizeof(c->session_owner), "%s", PQgetvalue(res, 0, 0));
			c->owner_known = true;
		}
		PQclear(res);
	}
}

static void
connect_client(Client *c)
{
	char		app[32];

	if (c->conn)
		PQfinish(c->conn);
	c->in_xact = c->xact_failed = c->savepoint = false;
	forget_xact(c, true);
	/* an open transaction's fate is unknown; its backend ends it on exit */
	settle_pending(c, SETTLE_UNKNOWN);
	c->nxact_leases = 0;
	c->events = false;
	snprintf(app, sizeof(app), "dlock_fuzz c%d", c->id);
	for (int attempt = 0;; attempt++)
	{
		c->db = rnd_int(ndbs);
		c->role = rnd_int(nroles);
		c->conn = connect_as(db_list[c->db], role_list[c->role], app);
		if (PQstatus(c->conn) == CONNECTION_OK)
			break;
		/* too many connections, or the server is restarting a backend */
		if (attempt == 200)
		{
			fprintf(stderr, "c%d: cannot connect: %s", c->id, PQerrorMessage(c->conn));
			violation(c->st, "c%d: could not reconnect for 20 s", c->id);
			exit(1);
		}
		PQfinish(c->conn);
		load_sleep_us(100000);
	}
	c->st->reconnects++;
	c->st->pid = PQbackendPID(c->conn);
	{
		char		sql[64];

		snprintf(sql, sizeof(sql), "SET statement_timeout = %d", 50 + rnd_int(stmt_timeout_max_ms - 50));
		simple(c, sql);
	}
	/*
	 * Some sessions send change events.  A SET that failed changed nothing;
	 * one whose connection was lost left a new session of its own.
	 */
	if (chance(35) && simple(c, "SET dlock.events = on") == OUT_OK)
	{
		c->events = true;
		c->st->events_on++;
	}
	learn_owner(c);
}

/* ---- argument choice ---- */

typedef struct Choice
{
	Arg			name;
	int			tracked_name;	/* index into n0..; -1 if another name */
	Arg			owner;
	int			tracked_owner;	/* index into the client's owners; -1 else */
	bool		default_owner;	/* owner argument left out */
	bool		foreign_owner;	/* another client's owner string */
} Choice;

static void
choose_name(Client *c, Choice *ch)
{
	int			k = rnd_int(100);

	ch->tracked_name = -1;
	if (k < 70)
	{
		ch->tracked_name = rnd_int(opts.names);
		arg_fmt(&ch->name, "n%d", ch->tracked_name);
		return;
	}
	c->st->hostile_names++;
	switch (rnd_int(16))
	{
		case 0:
			arg_set(&ch->name, NULL);
			break;
		case 1:
			arg_set(&ch->name, "");
			break;
		case 2:
			arg_own(&ch->name, random_text(200, false));
			break;
		case 3:
			arg_own(&ch->name, random_text(201, false));
			break;
		case 4:
			if (chance(10))
			{
				c->st->big_args++;
				arg_own(&ch->name, random_text(1 << 20, false));
			}
			else
				arg_own(&ch->name, random_text(1 + rnd_int(4000), false));
			break;
		case 5:
			arg_own(&ch->name, random_text(1 + rnd_int(200), true));
			break;
		case 6:
			arg_own(&ch->name, repeat_str("\xc3\xa9", 100, rnd_int(2) ? "" : "x"));
			break;
		case 7:
			arg_own(&ch->name, repeat_str("\xf0\x9f\x98\x80", 50, rnd_int(2) ? "" : "\xc3\xa9"));
			break;
		case 8:
			arg_set(&ch->name, rnd_int(2) ? "\xff\xfe invalid utf8" : "\xc3");
			break;
		case 9:
			arg_set(&ch->name, "sentinel");
			break;
		case 10:
			arg_set(&ch->name, rnd_int(2) ? "%s%s%s%n%x" : "x'); DELETE FROM dlock_leases; --");
			break;
		case 11:
			/* a fresh name: fills the lease table */
			arg_fmt(&ch->name, "r-%d-%" PRIu64, c->id, rnd() % 1000000);
			break;
		default:
			/* a tracked name with a twist: trailing space, case, newline */
			{
				static const char *const tw[] = {"n%d ", "N%d", "n%d\n", " n%d", "n%d\t"};

				arg_fmt(&ch->name, tw[rnd_int(5)], rnd_int(opts.names));
			}
			break;
	}
}

static void
choose_owner(Client *c, Choice *ch)
{
	int			k = rnd_int(100);

	ch->tracked_owner = -1;
	ch->default_owner = false;
	ch->foreign_owner = false;
	if (k < 60)
	{
		ch->tracked_owner = rnd_int(OWNERS_PER);
		arg_set(&ch->owner, c->owners[ch->tracked_owner]);
	}
	else if (k < 72)
	{
		ch->default_owner = true;
		arg_set(&ch->owner, NULL);
	}
	else if (k < 84)
		arg_fmt(&ch->owner, "h-shared-%d", rnd_int(3));
	else
	{
		switch (rnd_int(9))
		{
			case 0:
				arg_set(&ch->owner, NULL);
				break;
			case 1:
				arg_set(&ch->owner, "");
				break;
			case 2:
				arg_own(&ch->owner, repeat_str("h", 128, ""));
				break;
			case 3:
				arg_own(&ch->owner, repeat_str("h", 129, ""));
				break;
			case 4:
				arg_set(&ch->owner, "sentinel");
				break;
			case 5:
				arg_own(&ch->owner, random_text(1 + rnd_int(128), true));
				break;
			case 6:
				if (chance(10))
				{
					c->st->big_args++;
					arg_own(&ch->owner, random_text(1 << 20, false));
				}
				else
					arg_own(&ch->owner, repeat_str("\xc3\xa9", 64, rnd_int(2) ? "" : "h"));
				break;
			case 7:
				arg_set(&ch->owner, "\xc3(");
				break;
			default:
				/* another client's owner string: refused unless same role */
				arg_fmt(&ch->owner, "c%d.%x-o%d", rnd_int(opts.clients), run_nonce, rnd_int(OWNERS_PER));
				ch->foreign_owner = true;
				break;
		}
	}
}

static void
choose_ttl(Arg *a)
{
	int			k = rnd_int(100);

	if (k < 10)
		arg_set(a, NULL);
	else if (k < 75)
		arg_fmt(a, "%d ms", 20 + rnd_int(rnd_int(4) ? 500 : 3000));
	else if (k < 80)
		arg_fmt(a, "%d microseconds", 1 + rnd_int(2000));
	else
		arg_set(a, hostile_intervals[rnd_int(N_HOSTILE_INTERVALS)]);
}

static void
choose_timeout(Arg *a)
{
	int			k = rnd_int(100);

	if (k < 8)
		arg_set(a, NULL);		/* until granted or statement_timeout */
	else if (k < 20)
		arg_set(a, "0");
	else if (k < 80)
		arg_fmt(a, "%d ms", 1 + rnd_int(rnd_int(5) ? 50 : 200));
	else
		arg_set(a, hostile_intervals[rnd_int(N_HOSTILE_INTERVALS)]);
}

/*
 * The lifetime argument of a grant call: LT_TTL, LT_SESSION or LT_XACT as
 * given; LT_UNKNOWN for the default (left out or NULL); -1 for an invalid
 * value (22023).
 */
static int
choose_lifetime(Arg *a, bool *given)
{
	static const char *const bad[] = {"", "Session", "xact", "ttl ", "forever", "transaction\n"};
	int			k = rnd_int(100);

	*given = k >= 50;
	if (k < 58)
	{
		arg_set(a, NULL);
		return LT_UNKNOWN;
	}
	if (k < 68)
	{
		arg_set(a, "ttl");
		return LT_TTL;
	}
	if (k < 82)
	{
		arg_set(a, "session");
		return LT_SESSION;
	}
	if (k < 96)
	{
		arg_set(a, "transaction");
		return LT_XACT;
	}
	arg_set(a, bad[rnd_int(6)]);
	return -1;
}

/* min_hold: mostly none; short holds; holds above the ttl (22023); hostile */
static void
choose_min_hold(Arg *a, bool *given)
{
	int			k = rnd_int(100);

	*given = k >= 70;
	if (k < 73)
		arg_set(a, NULL);
	else if (k < 76)
		arg_set(a, "0");
	else if (k < 92)
		arg_fmt(a, "%d ms", 5 + rnd_int(400));
	else if (k < 96)
		arg_fmt(a, "%d ms", 500 + rnd_int(2500));
	else
		arg_set(a, hostile_intervals[rnd_int(N_HOSTILE_INTERVALS)]);
}

static void
choose_token(Client *c, Choice *ch, Arg *a)
{
	int64_t		t = 0;
	int			k = rnd_int(100);

	if (ch->tracked_name >= 0 && ch->tracked_owner >= 0)
		t = c->tracked[c->db][c->role][ch->tracked_name][ch->tracked_owner].token;
	if (k < 25)
		arg_set(a, NULL);
	else if (k < 60 && t != 0)
		arg_fmt(a, "%" PRId64, t);
	else if (k < 70 && t != 0)
		arg_fmt(a, "%" PRId64, t + (rnd_int(2) ? 1 : -1));
	else if (k < 80 && c->st->nrecords > 0)
		arg_fmt(a, "%" PRId64, c->rec[rnd_int(c->st->nrecords)].token);
	else
	{
		static const char *const odd[] = {
			"0", "-1", "9223372036854775807", "-9223372036854775808",
			"9223372036854775808", "abc", "1.5", " 42 ", "281474976710656",
		};

		arg_set(a, odd[rnd_int(9)]);
	}
}

static Tracked *
tracked_of(Client *c, const Choice *ch)
{
	if (ch->tracked_name < 0 || ch->tracked_owner < 0)
		return NULL;
	return &c->tracked[c->db][c->role][ch->tracked_name][ch->tracked_owner];
}

/* Records a token returned by try/acquire. */
static void
note_grant(Client *c, const Choice *ch, int64_t token, int64_t t_send, int64_t t_recv)
{
	Tracked    *t = tracked_of(c, ch);
	const char *owner = NULL;
	size_t		owner_len = 0;
	bool		fresh = false;

	c->st->grants++;
	if (ch->default_owner)
	{
		if (!c->owner_known)
			return;
		owner = c->session_owner;
		owner_len = strlen(owner);
	}
	else
	{
		owner = ch->owner.v;
		owner_len = ch->owner.len;
	}
	if (t != NULL)
	{
		fresh = !t->uncertain && token != t->token;
		/* a queued request's grant: after the call that queued it */
		if (t->queued_send != 0 && t->queued_send < t_send)
			t_send = t->queued_send;
		t->queued_send = 0;
		t->token = token;
		t->uncertain = false;
		if (c->in_xact)
			t->touched = true;
	}
	if (fresh)
		c->st->fresh++;
	add_record(c->st, c->rec, token, t_send, t_recv,
			   holder_hash(db_list[c->db], ch->name.v, ch->name.len, owner, owner_len,
						   role_list[c->role]), fresh, 0);
}

static void
choice_free(Choice *ch)
{
	arg_free(&ch->name);
	arg_free(&ch->owner);
}

/* A write through the fencing trigger with a token */
static const char insert_row[] = "INSERT INTO fz_rows (name, tok) VALUES ($1, $2::bigint)";

/*
 * A write that carries no token, to the rows written with the live lease's
 * token (which the trigger would find valid), marking them stale.  Sent
 * where nothing fenced, it must be refused.
 */
static const char stale_update[] =
"UPDATE fz_rows SET stale = true WHERE name = $1"
" AND tok IN (SELECT token FROM dlock_locks WHERE name = $1)";

/* Judges the outcome of stale_update. */
static void
judge_stale(Client *c, Outcome out, PGresult *res, const Arg *name)
{
	char		a[100];

	c->st->stale_sent++;
	if (out == OUT_ERROR && strcmp(c->last_code, "DL001") == 0)
		c->st->stale_refused++;
	if (out != OUT_OK)
		return;
	if (strcmp(PQcmdTuples(res), "0") == 0)
	{
		c->st->stale_no_row++;
		return;
	}
	show_arg(a, sizeof(a), name);
	violation(c->st, "c%d: an UPDATE that sets no token was accepted (UPDATE %s, %s) for name %s",
			  c->id, PQcmdTuples(res), c->in_xact ? "in a transaction that fenced nothing" : "alone", a);
}

/*
 * What the event check and the lifetime checks learn from a grant call that
 * returned granted (0: NULL, an error, or a lost reply).  A tracked
 * holder's grant is certainly new when its token differs from the last one
 * with no lost reply since (note_grant's "fresh"); certainly none when the
 * call failed (its statement, or its transaction, is undone) or returned
 * NULL or the same token; anything else is uncertain.
 */
static void
judge_grant(Client *c, const Choice *ch, const Tracked *t, Outcome out, int64_t granted,
			int lifetime, bool min_hold_given, bool was_uncertain, int64_t was_token,
			bool was_in_xact, bool was_events, bool queue_call, bool was_queued)
{
	if (granted != 0)
	{
		if (lifetime == LT_SESSION)
			c->st->lt_session++;
		else if (lifetime == LT_XACT)
			c->st->lt_xact++;
		else if (lifetime == LT_UNKNOWN && ch->default_owner && c->owner_known &&
				 strncmp(c->session_owner, "session:", 8) == 0)
			c->st->lt_default_session++;
		if (min_hold_given)
			c->st->min_holds++;
		/* this backend's transaction lease must be gone once its transaction is */
		if (lifetime == LT_XACT && c->nxact_leases < MAX_PENDING)
		{
			c->xact_leases[c->nxact_leases++] = granted;
			if (!was_in_xact)
				check_xact_leases(c);
		}
	}
	if (t == NULL)
		return;					/* an untracked holder: its events are not counted */
	if (out == OUT_LOST)
	{
		if (was_events)
			c->st->ev_uncertain++;
		return;
	}
	/*
	 * A request queued now is granted later, outside this session, with the
	 * "granted" event if the session that queued it had events on.
	 */
	if (queue_call && granted == 0 && out == OUT_OK)
	{
		if (was_events)
			c->st->ev_uncertain++;
		return;
	}
	if (granted == 0)
		return;

	/*
	 * The token may be that of a grant to the holder's queued request, whose
	 * event (if any) followed the session that queued it, not this one; or
	 * a grant of this call, whose event follows this session.
	 */
	if (was_queued)
	{
		if (was_events)
			c->st->ev_uncertain++;
		return;
	}
	if (was_uncertain || granted == was_token)
	{
		if (was_uncertain && was_events)
			c->st->ev_uncertain++;
		return;
	}
	/* certainly a new grant; a tracked owner is never the session's own */
	if (lifetime == LT_UNKNOWN)
		lifetime = LT_TTL;
	if (!was_events)
		add_evtok(c, granted, TAG_OFF, lifetime);
	else if (!was_in_xact)
		add_evtok(c, granted, TAG_K, lifetime);
	else if (c->npending < MAX_PENDING)
	{
		c->pending[c->npending].token = granted;
		c->pending[c->npending].lifetime = (uint8_t) lifetime;
		c->pending[c->npending].after_savepoint = c->savepoint;
		c->pending[c->npending].events = was_events;
		c->npending++;
	}
	else
		c->st->ev_uncertain++;
}

/*
 * dlock_enqueue's hold: mostly 0.1-3 s (so that requests left behind by a
 * client that moved on leave soon), now and then minutes; NULL (22004) and
 * hostile intervals (zero, negative, huge: class 22).
 */
static void
choose_hold(Arg *a)
{
	int			k = rnd_int(100);

	if (k < 5)
		arg_set(a, NULL);
	else if (k < 80)
		arg_fmt(a, "%d ms", 100 + rnd_int(2900));
	else if (k < 83)
		arg_set(a, "2 min");
	else
		arg_set(a, hostile_intervals[rnd_int(N_HOSTILE_INTERVALS)]);
}

/*
 * A dlock_enqueue call into args (name, ttl, owner, mode, permits, hold as
 * the form needs); returns its SQL.  Only exclusive requests: the checker
 * holds a name to one row.  A bad mode or permits is refused (22023).
 * Only the session's own owner leaves out hold (the default, 30 s).
 */
static const char *
choose_enqueue(Choice *ch, Arg *args, int *nparams)
{
	int			form = rnd_int(100);

	args[0] = ch->name;
	choose_ttl(&args[1]);
	if (ch->default_owner && form < 30)
	{
		*nparams = 2;
		return "SELECT dlock_enqueue($1, $2::interval)";
	}
	if (ch->default_owner)
	{
		choose_hold(&args[2]);
		*nparams = 3;
		return "SELECT dlock_enqueue(name => $1, ttl => $2::interval, hold => $3::interval)";
	}
	args[2] = ch->owner;
	choose_hold(&args[5]);
	if (form < 85)
	{
		args[3] = args[5];
		args[5] = (Arg) {0};
		*nparams = 4;
		return "SELECT dlock_enqueue($1, $2::interval, $3, hold => $4::interval)";
	}
	/* mode and permits given: valid as exclusive, else refused */
	switch (rnd_int(4))
	{
		case 0:
			arg_set(&args[3], "exclusive");
			break;
		case 1:
			arg_set(&args[3], NULL);
			break;
		default:
			arg_set(&args[3], rnd_int(2) ? "Exclusive" : "writer");
			break;
	}
	switch (rnd_int(4))
	{
		case 0:
			arg_set(&args[4], rnd_int(2) ? "0" : "-1");
			break;
		default:
			arg_set(&args[4], NULL);
			break;
	}
	*nparams = 6;
	return "SELECT dlock_enqueue($1, $2::interval, $3, $4, $5::integer, $6::interval)";
}

/* One random dlock call (or view read, or fenced write). */
static void
dlock_call(Client *c)
{
	Choice		ch = {0};
	Arg			args[6] = {{0}};
	const char *sql = NULL;
	int			nparams = 0;
	int			op = rnd_int(110);	/* 100..109: enqueue, dequeue */
	int			cancel_us = 0;
	int			hangup_us = 0;
	bool		grant_call = false;
	bool		queue_call = false; /* dlock_enqueue */
	bool		dequeue_call = false;
	bool		was_queued;
	bool		stale_write = false;
	bool		wrote_row;
	int64_t		granted = 0;
	PGresult   *res;
	Outcome		out;
	int64_t		t0,
				t1;
	Tracked    *t;
	char		grant_sql[200];
	int			lifetime = LT_UNKNOWN;
	bool		lifetime_given = false,
				min_hold_given = false;
	bool		was_uncertain,
				was_in_xact,
				was_events;
	int64_t		was_token;

	choose_name(c, &ch);
	choose_owner(c, &ch);
	c->st->dlock_calls++;
	/* the holder before any reconnect the call may cause */
	t = tracked_of(c, &ch);

	/*
	 * Another client's owner string may renew, release or fence (a member
	 * of the lease's role may), but a grant under it would let two clients
	 * share a holder, and the checker relies on private owners.
	 */
	if ((op < 48 || (op >= 100 && op < 107)) && ch.foreign_owner)
	{
		arg_free(&ch.owner);
		arg_set(&ch.owner, "h-shared-1");
	}
	if (op >= 107)
	{
		dequeue_call = true;
		args[0] = ch.name;
		if (ch.default_owner)
		{
			sql = "SELECT dlock_dequeue($1)";
			nparams = 1;
		}
		else
		{
			sql = "SELECT dlock_dequeue($1, $2)";
			args[1] = ch.owner;
			nparams = 2;
		}
	}
	else if (op >= 100)
	{
		grant_call = true;
		queue_call = true;
		sql = choose_enqueue(&ch, args, &nparams);
	}
	else if (op < 24)
	{
		grant_call = true;
		args[0] = ch.name;
		choose_ttl(&args[1]);
		if (ch.default_owner && rnd_int(2))
		{
			sql = "SELECT dlock_try($1, $2::interval)";
			nparams = 2;
		}
		else if (ch.default_owner)
		{
			sql = "SELECT dlock_try(name => $1)";
			nparams = 1;
		}
		else
		{
			sql = "SELECT dlock_try($1, $2::interval, $3)";
			args[2] = ch.owner;
			nparams = 3;
		}
	}
	else if (op < 48)
	{
		grant_call = true;
		args[0] = ch.name;
		choose_ttl(&args[1]);
		choose_timeout(&args[2]);
		if (ch.default_owner)
		{
			sql = "SELECT dlock_acquire($1, $2::interval, $3::interval)";
			nparams = 3;
		}
		else
		{
			sql = "SELECT dlock_acquire($1, $2::interval, $3::interval, $4)";
			args[3] = ch.owner;
			nparams = 4;
		}
		/* chaos while it may be waiting: cancel, or hang up */
		if (!c->in_xact && chance(3))
			cancel_us = 1 + rnd_int(30000);
		else if (!c->in_xact && chance(1))
			hangup_us = 1 + rnd_int(20000);
	}
	if (grant_call && !queue_call)
	{
		/* a lifetime and a minimum hold, by name, after the rest */
		size_t		len = strlen(sql) - 1;	/* without its ")" */
		Arg			lt = {0},
					mh = {0};

		for (int i = nparams; i < 4; i++)
			arg_free(&args[i]);	/* a ttl the call leaves out */
		lifetime = choose_lifetime(&lt, &lifetime_given);
		choose_min_hold(&mh, &min_hold_given);
		/* now and then a durable lease held a minute, for the restart */
		if (!ch.default_owner && chance(0.3))
		{
			arg_free(&args[1]);
			arg_set(&args[1], "10 min");
			arg_free(&mh);
			arg_set(&mh, "1 min");
			min_hold_given = true;
		}
		memcpy(grant_sql, sql, len);
		if (lifetime_given)
		{
			len += snprintf(grant_sql + len, sizeof(grant_sql) - len, ", lifetime => $%d", nparams + 1);
			args[nparams++] = lt;
		}
		else
			arg_free(&lt);
		if (min_hold_given)
		{
			len += snprintf(grant_sql + len, sizeof(grant_sql) - len, ", min_hold => $%d::interval", nparams + 1);
			args[nparams++] = mh;
		}
		else
			arg_free(&mh);
		snprintf(grant_sql + len, sizeof(grant_sql) - len, ")");
		sql = grant_sql;
	}
	else if (op < 60)
	{
		args[0] = ch.name;
		choose_ttl(&args[1]);
		if (ch.default_owner)
		{
			sql = "SELECT dlock_renew($1, $2::interval)";
			nparams = 2;
		}
		else
		{
			sql = "SELECT dlock_renew($1, $2::interval, $3)";
			args[2] = ch.owner;
			nparams = 3;
		}
	}
	else if (op < 76)
	{
		args[0] = ch.name;
		if (ch.default_owner)
		{
			sql = "SELECT dlock_release($1)";
			nparams = 1;
		}
		else
		{
			args[1] = ch.owner;
			choose_token(c, &ch, &args[2]);
			sql = "SELECT dlock_release($1, $2, $3::bigint)";
			nparams = 3;
		}
	}
	else if (op < 82)
	{
		args[0] = ch.name;
		choose_token(c, &ch, &args[1]);
		sql = "SELECT dlock_fence($1, $2::bigint)";
		nparams = 2;
		c->xact_fenced |= c->in_xact;
	}
	else if (op < 84)
	{
		args[0] = ch.name;
		choose_token(c, &ch, &args[1]);
		sql = insert_row;
		nparams = 2;
		c->xact_fenced |= c->in_xact;
	}
	else if (op < 86)
	{
		/*
		 * A transaction that may have fenced the rows' token may write
		 * them without setting it: that one leaves "stale" alone.
		 */
		args[0] = ch.name;
		nparams = 1;
		if (c->in_xact && c->xact_fenced)
			sql = "UPDATE fz_rows SET name = name WHERE name = $1"
				" AND tok IN (SELECT token FROM dlock_locks WHERE name = $1)";
		else
		{
			sql = stale_update;
			stale_write = true;
		}
	}
	else if (op < 88)
	{
		/* the sentinel belongs to the checker: never force it */
		if (ch.name.v != NULL && strcmp(ch.name.v, "sentinel") == 0)
		{
			arg_free(&ch.name);
			arg_set(&ch.name, "n0");
		}
		args[0] = ch.name;
		sql = "SELECT dlock_force_release($1)";
		nparams = 1;
	}
	else if (op < 90)
		sql = "SELECT dlock_sweep()";
	else if (op < 94)
		sql = "SELECT count(*), max(token), count(DISTINCT name) FROM dlock_locks";
	else if (op < 97)
		sql = "SELECT count(*) FROM dlock_waiters";
	else if (op < 99)
		sql = "SELECT * FROM dlock_stats";
	else if (op < 100)
		sql = "SELECT dlock_owner()";

	was_uncertain = t != NULL && t->uncertain;
	was_token = t != NULL ? t->token : 0;
	was_queued = t != NULL && t->queued_send != 0;
	was_in_xact = c->in_xact;
	was_events = c->events;
	t0 = load_now_us();
	out = exec(c, sql, nparams, args, &res, cancel_us, hangup_us, sql);
	t1 = load_now_us();

	if (stale_write)
		judge_stale(c, out, res, &ch.name);
	if (out == OUT_OK)
	{
		if (grant_call && PQntuples(res) == 1)
		{
			if (PQgetisnull(res, 0, 0))
				c->st->nulls++;
			else
			{
				granted = load_int64(res, 0, 0);
				note_grant(c, &ch, granted, t0, t1);
			}
		}
		if (queue_call && PQntuples(res) == 1 && PQgetisnull(res, 0, 0))
			c->st->enqueue_nulls++;
		if (dequeue_call && PQntuples(res) == 1 && !PQgetisnull(res, 0, 0) &&
			strcmp(PQgetvalue(res, 0, 0), "t") == 0)
		{
			c->st->dequeued++;
			/* nothing is queued for it now, nor granted to what was */
			if (t != NULL)
				t->queued_send = 0;
		}
		if (t != NULL && c->in_xact && !grant_call)
			t->touched = true;
		PQclear(res);
	}
	else if (t != NULL && grant_call)
		t->uncertain = true;	/* a grant may have happened and been undone */
	if (queue_call)
		c->st->enqueues++;
	if (granted != 0 && was_queued)
		c->st->queued_tokens++;
	if (dequeue_call)
		c->st->dequeues++;
	/* a request may be queued now, unless the call returned a token */
	if (queue_call && t != NULL && granted == 0 && t->queued_send == 0)
		t->queued_send = t0;
	if (out != OUT_LOST && c->in_xact)
		c->xact_dlock_ops++;
	if (grant_call)
		judge_grant(c, &ch, t, out, granted, lifetime, min_hold_given,
					was_uncertain, was_token, was_in_xact, was_events, queue_call,
					was_queued);

	/* a holder writes a row with the token it was just granted */
	wrote_row = sql == insert_row && out == OUT_OK;
	if (granted != 0 && !c->in_xact && chance(25))
	{
		Arg			row[2];

		row[0] = ch.name;
		arg_fmt(&row[1], "%" PRId64, granted);
		out = exec(c, insert_row, 2, row, &res, 0, 0, insert_row);
		wrote_row = out == OUT_OK;
		if (out == OUT_OK)
			PQclear(res);
		arg_free(&row[1]);
	}

	/*
	 * A row just written with a token is most likely the live lease's: the
	 * same name written again alone, without the token, is the stale write
	 * of a holder that lost its lease.
	 */
	if (wrote_row && !c->in_xact && chance(50))
	{
		out = exec(c, stale_update, 1, &ch.name, &res, 0, 0, "stale UPDATE");
		judge_stale(c, out, res, &ch.name);
		if (out == OUT_OK)
			PQclear(res);
	}

	for (int i = 0; i < 6; i++)
	{
		if (args[i].v != ch.name.v && args[i].v != ch.owner.v)
			arg_free(&args[i]);
	}
	choice_free(&ch);
}

/* A setting change, outside transactions (so a rollback cannot revert it). */
static void
settings_change(Client *c)
{
	char		sql[256];

	switch (rnd_int(6))
	{
		case 0:
			simple(c, rnd_int(2) ? "SET dlock.durable = off" : "SET dlock.durable = on");
			break;
		case 1:
			{
				static const char *const owners[] = {
					"RESET dlock.owner", "SET dlock.owner = ''", "SET dlock.owner = 'h-shared-0'",
					"SET dlock.owner = E'ctl\\x01\\x1b'",
					"SET dlock.owner = 'hhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhh'",
				};

				simple(c, owners[rnd_int(5)]);
				learn_owner(c);
			}
			break;
		case 2:
			snprintf(sql, sizeof(sql), "SET dlock.default_ttl = %d", rnd_int(2) ? 1 + rnd_int(3000) : rnd_int(2) ? 0 : -5);
			simple(c, sql);
			break;
		case 3:
			snprintf(sql, sizeof(sql), "SET statement_timeout = %d", 50 + rnd_int(stmt_timeout_max_ms - 50));
			simple(c, sql);
			break;
		case 4:
			/* lock_delay is sighup: refused here */
			simple(c, "SET dlock.lock_delay = 100");
			break;
		default:
			simple(c, "RESET dlock.default_ttl");
			break;
	}
}

/* Terminates another client's backend (roles with pg_signal_backend only). */
static void
terminate_other(Client *c)
{
	int			victim = rnd_int(opts.clients);
	int			pid = stats[victim].pid;
	char		sql[64];
	PGresult   *res;

	if (victim == c->id || pid == 0)
		return;
	snprintf(sql, sizeof(sql), "SELECT pg_terminate_backend(%d)", pid);
	if (exec(c, sql, 0, NULL, &res, 0, 0, "pg_terminate_backend") == OUT_OK)
	{
		if (strcmp(PQgetvalue(res, 0, 0), "t") == 0)
			c->st->terminations++;
		PQclear(res);
	}
}

/* Fills the lease table with short memory-only leases under fresh names. */
static void
flood(Client *c)
{
	char		sql[512];

	snprintf(sql, sizeof(sql),
			 "DO $$BEGIN PERFORM set_config('dlock.durable', 'off', true);"
			 " FOR g IN 1..%d LOOP BEGIN"
			 " PERFORM dlock_try('flood-%d-%d-' || g, '%d ms', 'flood');"
			 " EXCEPTION WHEN out_of_memory THEN EXIT; END; END LOOP; END$$",
			 100 + rnd_int(400), c->id, c->flood++, 300 + rnd_int(1500));
	c->st->floods++;
	simple(c, sql);
}

static void
end_xact(Client *c)
{
	int			k = rnd_int(100);

	if (c->xact_failed || k < 30)
	{
		/* (it does not commit even if the reply is lost) */
		if (simple(c, "ROLLBACK") != OUT_LOST)
			check_xact_leases(c);
		c->st->rollbacks++;
		forget_xact(c, true);
		settle_pending(c, SETTLE_ROLLED_BACK);
	}
	else if (k < 35)
	{
		char		sql[64];
		PGresult   *res;
		Outcome		out;

		/* refused with 0A000 if the transaction changed leases */
		snprintf(sql, sizeof(sql), "PREPARE TRANSACTION 'fz-%d-%d'", c->id, c->gid);
		c->st->prepares++;
		out = exec(c, sql, 0, NULL, &res, 0, 0, "PREPARE TRANSACTION");
		/* refused: rolled back; prepared: it changed no lease */
		settle_pending(c, out == OUT_ERROR ? SETTLE_ROLLED_BACK : SETTLE_UNKNOWN);
		if (out != OUT_LOST)
			check_xact_leases(c);
		if (out == OUT_OK)
		{
			PQclear(res);
			snprintf(sql, sizeof(sql), "%s PREPARED 'fz-%d-%d'",
					 rnd_int(2) ? "COMMIT" : "ROLLBACK", c->id, c->gid);
			c->in_xact = false;
			simple(c, sql);
		}
		c->gid++;
		forget_xact(c, true);
	}
	else
	{
		PGresult   *res;
		Outcome		out = exec(c, "COMMIT", 0, NULL, &res, 0, 0, "COMMIT");

		if (out == OUT_OK)
		{
			/* COMMIT of a failed transaction reports ROLLBACK */
			bool		rolled_back = strcmp(PQcmdStatus(res), "ROLLBACK") == 0;

			PQclear(res);
			forget_xact(c, rolled_back);
			settle_pending(c, rolled_back ? SETTLE_ROLLED_BACK : SETTLE_COMMITTED);
		}
		else
		{
			forget_xact(c, true);
			/* a COMMIT that fails has not committed */
			settle_pending(c, out == OUT_ERROR ? SETTLE_ROLLED_BACK : SETTLE_UNKNOWN);
		}
		if (out != OUT_LOST)
			check_xact_leases(c);
	}
	c->in_xact = c->xact_failed = c->savepoint = false;
}

static void
transaction(Client *c)
{
	int			n = 1 + rnd_int(6);

	PGresult   *res;

	if (exec(c, "BEGIN", 0, NULL, &res, 0, 0, "BEGIN") != OUT_OK)
		return;
	PQclear(res);
	c->in_xact = true;
	c->xact_failed = false;
	c->savepoint = false;
	c->xact_dlock_ops = 0;
	c->xact_fenced = false;
	c->npending = 0;
	c->nxact_leases = 0;
	c->st->xacts++;
	if (chance(5))
		simple(c, "SET TRANSACTION READ ONLY");
	for (int i = 0; i < n && c->conn != NULL && c->in_xact; i++)
	{
		if (!c->savepoint && chance(25))
		{
			simple(c, "SAVEPOINT s");
			c->savepoint = !c->xact_failed;
		}
		dlock_call(c);
		if (!c->in_xact)
			break;				/* the connection was lost */
		/* mostly stop early in a failed transaction (25P02 is cheap, not useful) */
		if (c->xact_failed && !c->savepoint && rnd_int(10) != 0)
			break;
		if (c->savepoint && (c->xact_failed || chance(20)))
		{
			/* holders touched since the savepoint may be undone */
			if (simple(c, "ROLLBACK TO SAVEPOINT s") == OUT_OK)
			{
				int			kept = 0;

				/* the grants made since are undone: no event, ever */
				for (int p = 0; p < c->npending; p++)
				{
					if (!c->pending[p].after_savepoint)
						c->pending[kept++] = c->pending[p];
					else if (c->pending[p].events)
						add_evtok(c, c->pending[p].token, TAG_R, 0);
				}
				c->npending = kept;
			}
			c->st->savepoint_rollbacks++;
			c->xact_failed = false;
			for (int d = 0; d < ndbs; d++)
				for (int r = 0; r < nroles; r++)
					for (int m = 0; m < opts.names; m++)
						for (int o = 0; o < OWNERS_PER; o++)
							if (c->tracked[d][r][m][o].touched)
								c->tracked[d][r][m][o].uncertain = true;
		}
	}
	if (c->in_xact)
		end_xact(c);
}

static void
client_main(int id, int64_t deadline)
{
	Client	   *c = calloc(1, sizeof(Client));

	me = c;
	c->id = id;
	c->st = &stats[id];
	c->rec = records + (size_t) id * RECORDS_PER;
	rng_state = opts.seed * 1000003 + (uint64_t) id * 7919;
	for (int o = 0; o < OWNERS_PER; o++)
		snprintf(c->owners[o], sizeof(c->owners[o]), "c%d.%x-o%d", id, run_nonce, o);
	connect_client(c);

	while (load_now_us() < deadline)
	{
		int			k = rnd_int(1000);

		if (k < 600)
			dlock_call(c);
		else if (k < 900)
			transaction(c);
		else if (k < 960)
			settings_change(c);
		else if (k < 965 && strcmp(role_list[c->role], "fz_c") == 0)
			terminate_other(c);
		else if (k < 968)
			flood(c);
		else if (k < 975)
		{
			connect_client(c);	/* another database and role */
		}
		else
			dlock_call(c);
	}
	if (c->in_xact)
		simple(c, "ROLLBACK");
	PQfinish(c->conn);
	c->st->finished = 1;
	exit(0);
}

/* ------------------------------------------------------------------ monitor */

/*
 * Session and transaction leases in one database, now: none has a row in
 * dlock_leases or is durable; a session lease not released within a hold
 * names a live backend (dlock_locks.pid is NULL once that backend is gone,
 * which is after its exit ended its leases); a lease released within its
 * hold has one.  And the backend a bound lease names runs: a lease seen
 * before and after a read of pg_stat_activity that lacks its pid outlived
 * its backend's exit (whose session leases end, and whose transaction
 * aborts, before it leaves pg_stat_activity).  Returns the violations.
 */
static long
check_bound_leases(PGconn *conn, const char *db, Stats *st)
{
	PGresult   *a,
			   *pids,
			   *b;
	long		bad = 0;
	static const char bound_sql[] =
		"SELECT token, pid FROM dlock_locks WHERE lifetime <> 'ttl' AND released_at IS NULL"
		" AND pid IS NOT NULL ORDER BY token";

	a = PQexec(conn,
			   "SELECT l.token, format('\"%s\" token %s lifetime %s pid %s durable %s granted_at %s"
			   " expires_at %s min_hold %s released_at %s', l.name, l.token, l.lifetime, l.pid, l.durable,"
			   " l.granted_at, l.expires_at, l.min_hold, l.released_at),"
			   " l.lifetime <> 'ttl' AND (l.durable OR r.name IS NOT NULL),"
			   " l.lifetime = 'session' AND l.released_at IS NULL AND l.pid IS NULL,"
			   " l.released_at IS NOT NULL AND l.min_hold IS NULL"
			   " FROM dlock_locks l LEFT JOIN dlock_leases r ON r.name = l.name AND r.token = l.token"
			   " WHERE l.lifetime <> 'ttl' OR l.released_at IS NOT NULL");
	if (PQresultStatus(a) != PGRES_TUPLES_OK)
	{
		PQclear(a);
		return 0;				/* (the caller's own query reports a failure) */
	}
	for (int i = 0; i < PQntuples(a); i++)
	{
		const char *what = PQgetvalue(a, i, 1);

		if (strcmp(PQgetvalue(a, i, 2), "t") == 0)
		{
			bad++;
			violation(st, "%s: a session or transaction lease has a row or is durable: %s", db, what);
		}
		if (strcmp(PQgetvalue(a, i, 3), "t") == 0)
		{
			bad++;
			violation(st, "%s: a session lease outlived its backend (pid NULL): %s", db, what);
		}
		if (strcmp(PQgetvalue(a, i, 4), "t") == 0)
		{
			bad++;
			violation(st, "%s: a lease is marked released but has no minimum hold: %s", db, what);
		}
	}
	PQclear(a);

	a = PQexec(conn, bound_sql);
	pids = PQexec(conn, "SELECT pid FROM pg_stat_activity");
	b = PQexec(conn, bound_sql);
	if (PQresultStatus(a) == PGRES_TUPLES_OK && PQresultStatus(pids) == PGRES_TUPLES_OK &&
		PQresultStatus(b) == PGRES_TUPLES_OK)
	{
		for (int i = 0; i < PQntuples(a); i++)
		{
			const char *pid = PQgetvalue(a, i, 1);
			bool		running = false;

			for (int j = 0; j < PQntuples(pids) && !running; j++)
				running = strcmp(PQgetvalue(pids, j, 0), pid) == 0;
			for (int j = 0; j < PQntuples(b) && !running; j++)
			{
				if (strcmp(PQgetvalue(b, j, 0), PQgetvalue(a, i, 0)) == 0 &&
					strcmp(PQgetvalue(b, j, 1), pid) == 0)
				{
					bad++;
					violation(st, "%s: lease token %s is bound to pid %s, which pg_stat_activity"
							  " did not show between two reads that showed the lease", db,
							  PQgetvalue(a, i, 0), pid);
				}
			}
		}
	}
	PQclear(a);
	PQclear(pids);
	PQclear(b);
	return bad;
}

/* Samples dlock_locks in every database while the clients run. */
static void
monitor_main(int64_t deadline)
{
	Stats	   *st = &stats[MAX_CLIENTS];
	Record	   *rec = records + (size_t) MAX_CLIENTS * RECORDS_PER;
	PGconn	   *conns[MAX_DBS];

	for (int d = 0; d < ndbs; d++)
		conns[d] = checker_conn(db_list[d]);
	while (load_now_us() < deadline)
	{
		for (int d = 0; d < ndbs; d++)
		{
			int64_t		t0 = load_now_us();
			PGresult   *res = PQexec(conns[d],
									 "SELECT name, owner, role::text, token, count(*) OVER (PARTITION BY name),"
									 " count(*) OVER (PARTITION BY token) FROM dlock_locks");
			int64_t		t1 = load_now_us();

			st->calls++;
			if (PQresultStatus(res) != PGRES_TUPLES_OK)
			{
				violation(st, "monitor: dlock_locks in %s failed: %s", db_list[d],
						  PQerrorMessage(conns[d]));
				PQclear(res);
				/* after a crash, wait for the server and go on sampling */
				if (PQstatus(conns[d]) != CONNECTION_OK)
				{
					PQfinish(conns[d]);
					for (int i = 0;; i++)
					{
						conns[d] = connect_as(db_list[d], NULL, "dlock_fuzz monitor");
						if (PQstatus(conns[d]) == CONNECTION_OK || i == 200)
							break;
						PQfinish(conns[d]);
						load_sleep_us(100000);
					}
				}
				continue;
			}
			for (int i = 0; i < PQntuples(res); i++)
			{
				const char *name = PQgetvalue(res, i, 0);
				const char *owner = PQgetvalue(res, i, 1);

				if (atoi(PQgetvalue(res, i, 4)) != 1 || atoi(PQgetvalue(res, i, 5)) != 1)
					violation(st, "monitor: %s: dlock_locks shows name \"%s\" %s times, token %s %s times",
							  db_list[d], name, PQgetvalue(res, i, 4), PQgetvalue(res, i, 3),
							  PQgetvalue(res, i, 5));
				add_record(st, rec, load_int64(res, i, 3), t0, t1,
						   holder_hash(db_list[d], name, PQgetlength(res, i, 0), owner,
									   PQgetlength(res, i, 1), PQgetvalue(res, i, 2)),
						   false, 1);
			}
			PQclear(res);
			check_bound_leases(conns[d], db_list[d], st);
		}
		load_sleep_us(50000);
	}
	for (int d = 0; d < ndbs; d++)
		PQfinish(conns[d]);
	st->finished = 1;
	exit(0);
}

/* ------------------------------------------------------------------ events */

/* The raw text of the JSON string at p (after its opening quote). */
static const char *
json_string(const char *p, const char **start, size_t *len)
{
	*start = p;
	while (*p != '\0' && *p != '"')
	{
		if (*p == '\\' && p[1] != '\0')
			p++;
		p++;
	}
	if (*p != '"')
		return NULL;
	*len = (size_t) (p - *start);
	return p + 1;
}

/* The client whose private owner (of this run) s is, or -1. */
static int
private_owner_client(const char *s, size_t len)
{
	char		buf[48],
				canon[48];
	int			id,
				o,
				n = 0;
	unsigned	nonce;

	if (len >= sizeof(buf))
		return -1;
	memcpy(buf, s, len);
	buf[len] = '\0';
	if (sscanf(buf, "c%d.%x-o%d%n", &id, &nonce, &o, &n) != 3 || n != (int) len ||
		nonce != run_nonce || id < 0 || id >= MAX_CLIENTS)
		return -1;
	snprintf(canon, sizeof(canon), "c%d.%x-o%d", id, nonce, o);
	return strcmp(canon, buf) == 0 ? id : -1;
}

/* Whether s is a tracked name, n0 .. n<names-1>. */
static bool
tracked_name(const char *s, size_t len)
{
	char		buf[16],
				canon[16];
	int			k;

	if (len >= sizeof(buf))
		return false;
	memcpy(buf, s, len);
	buf[len] = '\0';
	if (sscanf(buf, "n%d", &k) != 1 || k < 0 || k >= opts.names)
		return false;
	snprintf(canon, sizeof(canon), "n%d", k);
	return strcmp(canon, buf) == 0;
}

static int
word_index(const char *const *words, int n, const char *s, size_t len)
{
	for (int i = 0; i < n; i++)
		if (strlen(words[i]) == len && memcmp(words[i], s, len) == 0)
			return i;
	return -1;
}

/*
 * Parses one payload of database db: {"event": "granted", "name": "...",
 * "owner": "...", "token": N, "mode": "...", "lifetime": "...", "seq": N},
 * or {"event": "lost", "count": N}.  Strings keep their escapes: the name
 * is only hashed, and private owners need none.  False if malformed.
 */
static bool
parse_event(const char *payload, int db, Event *ev)
{
	const char *p = payload;
	int			have = 0;		/* bits: the keys seen */

	memset(ev, 0, sizeof(*ev));
	ev->client = -1;
	ev->db = (uint8_t) db;
	ev->kind = EV_BAD;
	ev->lifetime = LT_UNKNOWN;
	while (*p == ' ')
		p++;
	if (*p++ != '{')
		return false;
	for (;;)
	{
		const char *key,
				   *val = NULL;
		size_t		klen,
					vlen = 0;
		int64_t		num = 0;
		static const char *const keys[] = {"event", "name", "owner", "token", "mode", "lifetime", "seq", "count"};
		static const char *const modes[] = {"exclusive", "shared"};
		int			k,
					w;

		while (*p == ' ')
			p++;
		if (*p++ != '"' || (p = json_string(p, &key, &klen)) == NULL)
			return false;
		while (*p == ' ')
			p++;
		if (*p++ != ':')
			return false;
		while (*p == ' ')
			p++;
		if (*p == '"')
		{
			if ((p = json_string(p + 1, &val, &vlen)) == NULL)
				return false;
		}
		else
		{
			char	   *end;

			errno = 0;
			num = strtoll(p, &end, 10);
			if (end == p || errno != 0)
				return false;
			p = end;
		}
		k = word_index(keys, 8, key, klen);
		if (k < 0 || (have & (1 << k)) || (val == NULL) != (k == 3 || k == 6 || k == 7))
			return false;
		have |= 1 << k;
		switch (k)
		{
			case 0:
				if ((w = word_index(event_names, EV_BAD, val, vlen)) < 0)
					return false;
				ev->kind = (uint8_t) w;
				break;
			case 1:
				ev->name = fnv(fnv(UINT64_C(0xcbf29ce484222325), &db, sizeof(db)), val, vlen);
				ev->tracked = tracked_name(val, vlen);
				break;
			case 2:
				ev->client = (int16_t) private_owner_client(val, vlen);
				break;
			case 3:
				ev->token = num;
				break;
			case 4:
				if ((w = word_index(modes, 2, val, vlen)) < 0)
					return false;
				ev->shared = (uint8_t) w;
				break;
			case 5:
				if ((w = word_index(lifetime_names, LT_UNKNOWN, val, vlen)) < 0)
					return false;
				ev->lifetime = (uint8_t) w;
				break;
			case 6:
				ev->seq = num;
				break;
			default:
				ev->lost = num;
				break;
		}
		while (*p == ' ')
			p++;
		if (*p == ',')
		{
			p++;
			continue;
		}
		if (*p++ != '}' || *p != '\0')
			return false;
		break;
	}
	if (ev->kind == EV_LOST)
		return have == (1 << 0 | 1 << 7) && ev->lost > 0;
	return have == 0x7f;
}

/*
 * One LISTEN connection per database records every change event until the
 * checker says stop, in shared memory, in order of arrival.
 */
static void
listener_main(void)
{
	PGconn	   *conns[MAX_DBS];

	for (int d = 0; d < ndbs; d++)
	{
		conns[d] = checker_conn(db_list[d]);
		PQclear(load_must(conns[d], "LISTEN dlock"));
	}
	__atomic_store_n(&listen_state->ready, 1, __ATOMIC_RELEASE);
	for (;;)
	{
		bool		stop = __atomic_load_n(&listen_state->stop, __ATOMIC_ACQUIRE);
		struct pollfd pfd[MAX_DBS];

		for (int d = 0; d < ndbs; d++)
			pfd[d] = (struct pollfd) {conns[d] ? PQsocket(conns[d]) : -1, POLLIN, 0};
		if (!stop)
			poll(pfd, ndbs, 100);
		for (int d = 0; d < ndbs; d++)
		{
			PGnotify   *n;

			if (conns[d] == NULL)
				continue;
			if (!PQconsumeInput(conns[d]))
			{
				listen_state->lost_conn = 1;
				PQfinish(conns[d]);
				conns[d] = NULL;
				continue;
			}
			while ((n = PQnotifies(conns[d])) != NULL)
			{
				int			i = listen_state->nevents;

				if (i < MAX_EVENTS)
				{
					if (!parse_event(n->extra, d, &events[i]))
					{
						if (listen_state->malformed++ == 0)
							snprintf(listen_state->bad_payload, sizeof(listen_state->bad_payload),
									 "%s", n->extra);
					}
					else
					{
						events[i].arrival = i;
						__atomic_store_n(&listen_state->nevents, i + 1, __ATOMIC_RELEASE);
					}
				}
				PQfreemem(n);
			}
		}
		if (stop)
			break;
	}
	for (int d = 0; d < ndbs; d++)
		if (conns[d])
			PQfinish(conns[d]);
	exit(0);
}

/* The outcome of an event check; its messages are kept for the self-test */
typedef struct Report
{
	Stats	   *st;				/* NULL: quiet */
	long		bad;
	char		text[2000];
} Report;

static void
ev_fail(Report *r, const char *fmt,...)
{
	va_list		ap;
	char		msg[400];

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	r->bad++;
	snprintf(r->text + strlen(r->text), sizeof(r->text) - strlen(r->text), "%s; ", msg);
	if (r->st)
		violation(r->st, "events: %s", msg);
}

static int
cmp_ev_token(const void *a, const void *b)
{
	const Event *x = a,
			   *y = b;

	if (x->token != y->token)
		return x->token < y->token ? -1 : 1;
	return x->arrival < y->arrival ? -1 : x->arrival > y->arrival;
}

static int
cmp_ev_seq(const void *a, const void *b)
{
	const Event *x = a,
			   *y = b;

	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static int
cmp_ev_name(const void *a, const void *b)
{
	const Event *x = a,
			   *y = b;

	if (x->name != y->name)
		return x->name < y->name ? -1 : 1;
	return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* The first event of token in ev[0..n) sorted by token, or NULL. */
static const Event *
find_token(const Event *ev, size_t n, int64_t token)
{
	size_t		lo = 0,
				hi = n;

	while (lo < hi)
	{
		size_t		mid = (lo + hi) / 2;

		if (ev[mid].token < token)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && ev[lo].token == token ? &ev[lo] : NULL;
}

/*
 * Checks the change events ev[0..n) (reordered here) against what the
 * clients know (tags; known[c] and uncertain[c], the counts of client c's
 * certainly committed and uncertain grants of tracked holders in sessions
 * with events on) and the leases live now (live: tokens, with their
 * databases):
 *   - seq is unique; a lease (token) has one "granted", then at most one
 *     end, with a higher seq and the same lifetime; "ended" only for a
 *     session or transaction lease; no shared mode (the fuzz asks none);
 *   - per name, in seq order, grants and ends alternate (exclusive leases),
 *     every end ends the live lease, and granted tokens grow;
 *   - a lease with no end is live now;
 *   - every certainly committed new grant of a session with events on has
 *     its "granted", with the lifetime asked for; no event carries the token
 *     of a grant rolled back or made with events off;
 *   - client c's tracked holders have at least known[c] and at most
 *     known[c] + uncertain[c] grants.
 * Ends lost by the server ("lost" events, documented beyond 1,024 pending
 * ones) excuse as many missing ends in their database, and nothing else.
 */
static void
check_events(Event *ev, size_t n, const EvTok *tags, size_t ntags, const long *known,
			 const long *uncertain, int nclients, const EvTok *live, size_t nlive, Report *r)
{
	long		lost[MAX_DBS] = {0},
				unended[MAX_DBS] = {0},
				overlaps[MAX_DBS] = {0};
	long		grants[MAX_CLIENTS] = {0};
	size_t		m = 0;

	/* "lost" events out of the way, at the end */
	for (size_t i = 0; i < n; i++)
	{
		if (ev[i].kind == EV_LOST)
			lost[ev[i].db] += ev[i].lost;
		else
		{
			Event		t = ev[m];

			ev[m++] = ev[i];
			ev[i] = t;
		}
	}

	qsort(ev, m, sizeof(Event), cmp_ev_seq);
	for (size_t i = 1; i < m; i++)
		if (ev[i].seq == ev[i - 1].seq)
			ev_fail(r, "seq %" PRId64 " twice (tokens %" PRId64 " and %" PRId64 ")",
					ev[i].seq, ev[i - 1].token, ev[i].token);

	qsort(ev, m, sizeof(Event), cmp_ev_name);
	for (size_t i = 0; i < m;)
	{
		size_t		j;
		int64_t		holder = 0,
					top = 0;

		for (j = i; j < m && ev[j].name == ev[i].name; j++)
		{
			const Event *e = &ev[j];

			if (e->kind == EV_GRANTED)
			{
				if (holder != 0)
					overlaps[e->db]++;
				if (e->token <= top)
					ev_fail(r, "seq %" PRId64 " grants token %" PRId64 " of a name, not above its token %" PRId64,
							e->seq, e->token, top);
				top = e->token > top ? e->token : top;
				holder = e->token;
			}
			else
			{
				if (e->token != holder)
					ev_fail(r, "seq %" PRId64 " ends token %" PRId64 " (%s), which is not the name's live lease (%" PRId64 ")",
							e->seq, e->token, event_names[e->kind], holder);
				holder = 0;
			}
		}
		i = j;
	}

	qsort(ev, m, sizeof(Event), cmp_ev_token);
	for (size_t i = 0; i < m;)
	{
		size_t		j = i;
		const Event *g = &ev[i];

		while (j < m && ev[j].token == g->token)
			j++;
		if (g->kind != EV_GRANTED || j - i > 2 || (j - i == 2 && ev[i + 1].kind == EV_GRANTED))
		{
			char		kinds[64] = "";

			for (size_t k = i; k < j && k < i + 4; k++)
				snprintf(kinds + strlen(kinds), sizeof(kinds) - strlen(kinds), " %s", event_names[ev[k].kind]);
			ev_fail(r, "token %" PRId64 ": events%s (want granted, then one end)", g->token, kinds);
		}
		else if (j - i == 2)
		{
			const Event *e = &ev[i + 1];

			if (e->seq < g->seq)
				ev_fail(r, "token %" PRId64 ": its end has a lower seq than its grant", g->token);
			if (e->lifetime != g->lifetime || e->db != g->db || e->name != g->name)
				ev_fail(r, "token %" PRId64 ": granted as %s, ended as %s (or on another name)",
						g->token, lifetime_names[g->lifetime], lifetime_names[e->lifetime]);
			if (e->kind == EV_ENDED && g->lifetime == LT_TTL)
				ev_fail(r, "token %" PRId64 ": a ttl lease sent \"ended\"", g->token);
		}
		else
		{
			/* no end yet: live now */
			bool		is_live = false;

			for (size_t k = 0; k < nlive && !is_live; k++)
				is_live = live[k].token == g->token && live[k].db == g->db;
			if (!is_live)
				unended[g->db]++;
		}
		if (g->shared)
			ev_fail(r, "token %" PRId64 ": mode shared, which the fuzz never asks", g->token);
		if (g->kind == EV_GRANTED && g->client >= 0 && g->tracked)
			grants[g->client]++;
		i = j;
	}
	for (int d = 0; d < MAX_DBS; d++)
	{
		if (unended[d] > lost[d])
			ev_fail(r, "%s: %ld leases sent \"granted\", never an end, and are not live (%ld ends lost)",
					d < ndbs ? db_list[d] : "?", unended[d], lost[d]);
		if (overlaps[d] > lost[d])
			ev_fail(r, "%s: %ld grants of a name while its last granted lease had sent no end (%ld ends lost)",
					d < ndbs ? db_list[d] : "?", overlaps[d], lost[d]);
	}

	for (size_t i = 0; i < ntags; i++)
	{
		const Event *e = find_token(ev, m, tags[i].token);
		static const char *const what[] = {"a committed new grant", "a rolled-back grant",
		"a grant with events off"};

		if (tags[i].tag == TAG_K)
		{
			if (e == NULL || e->kind != EV_GRANTED || e->db != tags[i].db)
				ev_fail(r, "token %" PRId64 ", %s of a session with events on, was never sent as granted",
						tags[i].token, what[0]);
			else if (e->lifetime != tags[i].lifetime)
				ev_fail(r, "token %" PRId64 " was asked with lifetime %s, its event says %s",
						tags[i].token, lifetime_names[tags[i].lifetime], lifetime_names[e->lifetime]);
		}
		else if (e != NULL)
			ev_fail(r, "token %" PRId64 ", %s, sent event %s", tags[i].token, what[tags[i].tag],
					event_names[e->kind]);
	}
	for (int c = 0; c < nclients; c++)
	{
		if (grants[c] < known[c] || grants[c] > known[c] + uncertain[c])
			ev_fail(r, "c%d: %ld \"granted\" events of its tracked holders; it made %ld committed new grants"
					" with events on, and %ld grant calls with an unknown outcome",
					c, grants[c], known[c], uncertain[c]);
	}
}

/* The event checker on a valid stream, then on each of a set of doctored ones. */
static int
events_self_test(void)
{
	static const Event base[] = {
		/* token, seq, name, lost, arrival, client, db, kind, lifetime */
		{101, 1, 1, 0, 0, 0, 0, EV_GRANTED, LT_TTL, 0, 1},
		{101, 2, 1, 0, 1, 0, 0, EV_RELEASED, LT_TTL, 0, 1},
		{103, 4, 1, 0, 2, 0, 0, EV_GRANTED, LT_SESSION, 0, 1},
		{102, 3, 2, 0, 3, -1, 0, EV_GRANTED, LT_XACT, 0, 0},
		{102, 5, 2, 0, 4, -1, 0, EV_ENDED, LT_XACT, 0, 0},
		{103, 6, 1, 0, 5, 0, 0, EV_ENDED, LT_SESSION, 0, 1},
		{104, 7, 1, 0, 6, 1, 0, EV_GRANTED, LT_TTL, 0, 1},
		{105, 8, 2, 0, 7, -1, 0, EV_GRANTED, LT_TTL, 0, 0},
		{105, 9, 2, 0, 8, -1, 0, EV_EXPIRED, LT_TTL, 0, 0},
	};
	static const EvTok tags[] = {{101, 0, TAG_K, LT_TTL}, {103, 0, TAG_K, LT_SESSION},
	{99, 0, TAG_R, 0}, {98, 0, TAG_OFF, 0}};
	static const EvTok live[] = {{104, 0, 0, 0}};
	long		known[2] = {2, 0},
				uncertain[2] = {0, 1};
	const size_t nb = sizeof(base) / sizeof(base[0]);
	struct
	{
		const char *what;
		int			change;		/* which doctoring */
		const char *want;		/* in the report */
	}			cases[] = {
		{"an end missing", 1, "not live"},
		{"a grant missing", 2, "want granted, then one end"},
		{"an end with a lower seq", 3, "lower seq"},
		{"a seq twice", 4, "twice"},
		{"two holders of a name", 5, "had sent no end"},
		{"a token that goes back", 6, "not above"},
		{"an event of a rolled-back grant", 7, "rolled-back"},
		{"an event of a grant with events off", 8, "events off"},
		{"a committed grant never sent", 9, "never sent"},
		{"a lifetime other than asked", 10, "asked with lifetime"},
		{"a ttl lease \"ended\"", 11, "a ttl lease sent"},
		{"an end twice", 12, "want granted, then one end"},
		{"more grants than calls", 13, "unknown outcome"},
		{"an end of a lease not live", 14, "not the name's live lease"},
		{"a lost end excuses one missing end, not two", 15, "ends lost"},
	};
	Event		ev[16];
	Report		r = {0};
	int			failed = 0;

	run_nonce = 0xabc;
	memcpy(ev, base, sizeof(base));
	check_events(ev, nb, tags, 4, known, uncertain, 2, live, 1, &r);
	if (r.bad)
	{
		printf("self-test: the valid stream fails: %s\n", r.text);
		return 1;
	}
	for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++)
	{
		size_t		n = nb;
		EvTok		t[4];
		size_t		nt = 4;

		memcpy(ev, base, sizeof(base));
		memcpy(t, tags, sizeof(tags));
		switch (cases[c].change)
		{
			case 1:				/* 105's expiry lost */
				ev[8] = ev[--n];
				break;
			case 2:
				ev[0] = ev[--n];
				break;
			case 3:
				ev[1].seq = 0;
				break;
			case 4:
				ev[8].seq = 1;
				break;
			case 5:				/* 101's release arrives after 103's grant */
				ev[1].seq = 5;
				ev[2].seq = 4;
				ev[5].seq = 10;
				break;
			case 6:
				ev[6].token = 100;
				break;
			case 7:
				t[0].tag = TAG_R;
				break;
			case 8:
				t[1].tag = TAG_OFF;
				break;
			case 9:
				t[2] = (EvTok) {106, 0, TAG_K, LT_TTL};
				break;
			case 10:
				t[0].lifetime = LT_XACT;
				break;
			case 11:
				ev[8].kind = EV_ENDED;
				break;
			case 12:
				ev[n] = ev[8];
				ev[n].seq = 20;
				ev[n++].arrival = 20;
				break;
			case 13:
				ev[7].client = 1;
				ev[7].tracked = 1;
				break;
			case 14:
				ev[n] = (Event) {107, 30, 1, 0, 30, -1, 0, EV_EXPIRED, LT_TTL, 0, 1};
				n++;
				break;
			case 15:
				ev[8] = (Event) {0, 0, 0, 1, 8, -1, 0, EV_LOST, LT_UNKNOWN, 0, 0};
				ev[5] = ev[--n];
				break;
		}
		r = (Report) {0};
		check_events(ev, n, t, nt, known, uncertain, 2, live, 1, &r);
		if (strstr(r.text, cases[c].want) != NULL)
			printf("self-test: %-45s caught: %.100s\n", cases[c].what, strstr(r.text, cases[c].want));
		else
		{
			printf("self-test: %-45s NOT CAUGHT (want \"%s\"; got: %s)\n", cases[c].what,
				   cases[c].want, r.bad ? r.text : "nothing");
			failed++;
		}
	}
	printf("RESULT: %s\n", failed ? "FAIL" : "PASS");
	return failed ? 1 : 0;
}

/* ------------------------------------------------------------------ checks */

static int
cmp_token(const void *a, const void *b)
{
	const Record *x = a,
			   *y = b;

	if (x->token != y->token)
		return x->token < y->token ? -1 : 1;
	return 0;
}

static int
cmp_recv(const void *a, const void *b)
{
	const Record *x = a,
			   *y = b;

	if (x->t_recv != y->t_recv)
		return x->t_recv < y->t_recv ? -1 : 1;
	return 0;
}

/*
 * One token, one holder; and a certainly new grant is above every token
 * received by anyone before its call was sent.
 */
static long
check_tokens(Record *all, size_t n, Stats *st, int64_t *max_token, long *nfresh)
{
	long		bad = 0;
	int64_t    *prefix_max;
	size_t		dup_shown = 0;

	qsort(all, n, sizeof(Record), cmp_token);
	for (size_t i = 1; i < n; i++)
	{
		if (all[i].token == all[i - 1].token && all[i].holder != all[i - 1].holder)
		{
			bad++;
			if (dup_shown++ < 5)
				violation(st, "token %" PRId64 " was returned to two different holders"
						  " (database, name, owner or role differ; record kinds %d and %d)",
						  all[i].token, all[i - 1].kind, all[i].kind);
		}
	}
	*max_token = n > 0 ? all[n - 1].token : 0;

	qsort(all, n, sizeof(Record), cmp_recv);
	prefix_max = malloc(sizeof(int64_t) * (n + 1));
	prefix_max[0] = INT64_MIN;
	for (size_t i = 0; i < n; i++)
		prefix_max[i + 1] = all[i].token > prefix_max[i] ? all[i].token : prefix_max[i];
	*nfresh = 0;
	for (size_t i = 0; i < n; i++)
	{
		size_t		lo = 0,
					hi = n;

		if (!all[i].fresh)
			continue;
		(*nfresh)++;
		/* records received strictly before this call was sent: [0, lo) */
		while (lo < hi)
		{
			size_t		mid = (lo + hi) / 2;

			if (all[mid].t_recv < all[i].t_send)
				lo = mid + 1;
			else
				hi = mid;
		}
		if (lo > 0 && prefix_max[lo] >= all[i].token)
		{
			bad++;
			violation(st, "new grant with token %" PRId64 " is not above token %" PRId64
					  ", which a call received before this grant's call was sent",
					  all[i].token, prefix_max[lo]);
		}
	}
	free(prefix_max);
	return bad;
}

/* Checks one database once every client has stopped. */
static long
check_quiescent(int d, Stats *st, const char *sentinel_token, Record *extra, size_t *nextra)
{
	PGconn	   *conn = checker_conn(db_list[d]);
	PGresult   *res;
	long		bad = 0;
	int			waiting = -1;

	/* backends of clients that hung up or were killed leave the queue */
	for (int i = 0; i < 100; i++)
	{
		res = load_must(conn, "SELECT count(*) FROM dlock_waiters WHERE pid IS NOT NULL");
		waiting = atoi(PQgetvalue(res, 0, 0));
		PQclear(res);
		if (waiting == 0)
			break;
		load_sleep_us(100000);
	}
	if (waiting != 0)
	{
		bad++;
		violation(st, "%s: %d sessions still in dlock_waiters 10 s after the end", db_list[d], waiting);
	}

	/*
	 * Queued requests stay for their hold (up to minutes here): the checker,
	 * a superuser, has every role's privileges, so dlock_dequeue leaves each.
	 * A request may be granted or run out of hold meanwhile, so ask again
	 * until none is left (a few rounds).
	 */
	for (int i = 0; i < 10; i++)
	{
		res = load_must(conn, "SELECT count(*) FILTER (WHERE dlock_dequeue(name, owner)), count(*)"
						" FROM dlock_waiters WHERE pid IS NULL");
		st->leftover_queued += atol(PQgetvalue(res, 0, 0));
		waiting = atoi(PQgetvalue(res, 0, 1));
		PQclear(res);
		if (waiting == 0)
			break;
	}
	/* dlock_stats is the cluster's: queued is 0 once every database is done */
	res = load_must(conn, "SELECT (SELECT count(*) FROM dlock_waiters), waiting, queued FROM dlock_stats");
	if (strcmp(PQgetvalue(res, 0, 0), "0") != 0 || strcmp(PQgetvalue(res, 0, 1), "0") != 0 ||
		(d == ndbs - 1 && strcmp(PQgetvalue(res, 0, 2), "0") != 0))
	{
		bad++;
		violation(st, "%s: after the end and the checker's dlock_dequeue: %s rows in dlock_waiters,"
				  " dlock_stats.waiting %s, dlock_stats.queued %s (all 0; queued once every database is done)",
				  db_list[d], PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1), PQgetvalue(res, 0, 2));
	}
	PQclear(res);

	/* one row per name and per token */
	res = load_must(conn, "SELECT name, count(*) FROM dlock_locks GROUP BY name HAVING count(*) > 1"
			   " UNION ALL SELECT token::text, count(*) FROM dlock_locks GROUP BY token HAVING count(*) > 1");
	if (PQntuples(res) > 0)
	{
		bad++;
		violation(st, "%s: dlock_locks has %d names or tokens on more than one row", db_list[d], PQntuples(res));
	}
	PQclear(res);

	/*
	 * every durable live lease with a row version has its row: same token,
	 * owner and role (a deferred one has neither, and no row yet)
	 */
	res = load_must(conn,
			   "SELECT l.name, l.token, r.token, l.owner = r.owner, l.role::oid = r.role"
			   " FROM dlock_locks l LEFT JOIN dlock_leases r ON r.name = l.name"
			   " WHERE l.durable AND l.version IS NOT NULL AND (r.name IS NULL OR r.token <> l.token OR r.owner <> l.owner"
			   " OR r.role <> l.role::oid)");
	for (int i = 0; i < PQntuples(res); i++)
	{
		bad++;
		violation(st, "%s: durable lease \"%.60s\" token %s: its row %s (token %s, owner same %s, role same %s)",
				  db_list[d], PQgetvalue(res, i, 0), PQgetvalue(res, i, 1),
				  PQgetisnull(res, i, 2) ? "is missing" : "differs", PQgetvalue(res, i, 2),
				  PQgetvalue(res, i, 3), PQgetvalue(res, i, 4));
	}
	PQclear(res);

	/* dlock_locks.version is the row's version (also after rollbacks) */
	res = load_must(conn,
			   "SELECT l.name, l.version, r.version FROM dlock_locks l JOIN dlock_leases r ON r.name = l.name"
			   " AND r.token = l.token WHERE l.durable AND l.version <> r.version");
	for (int i = 0; i < PQntuples(res); i++)
	{
		bad++;
		violation(st, "%s: dlock_locks shows version %s for \"%.60s\", its row has version %s",
				  db_list[d], PQgetvalue(res, i, 1), PQgetvalue(res, i, 0), PQgetvalue(res, i, 2));
	}
	PQclear(res);

	/*
	 * A row claiming a lease live for a while yet must be that live lease;
	 * otherwise a restart would bring back a lease that ended.
	 */
	res = load_must(conn,
			   "SELECT r.name, r.token, l.token,"
			   " format('row: owner %s role %s granted %s expires %s version %s; now %s',"
			   "  r.owner, r.role::regrole, r.granted_at, r.expires_at, r.version, clock_timestamp()),"
			   " format('memory: owner %s role %s granted %s expires %s version %s durable %s',"
			   "  l.owner, l.role, l.granted_at, l.expires_at, l.version, l.durable)"
			   " FROM dlock_leases r LEFT JOIN dlock_locks l ON l.name = r.name"
			   " WHERE r.expires_at > clock_timestamp() + interval '200 ms'"
			   " AND (l.name IS NULL OR l.token <> r.token)");
	for (int i = 0; i < PQntuples(res); i++)
	{
		bad++;
		violation(st, "%s: row of \"%.60s\" says token %s is live, shared memory says %s\n  %s\n  %s",
				  db_list[d], PQgetvalue(res, i, 0), PQgetvalue(res, i, 1),
				  PQgetisnull(res, i, 2) ? "no lease" : PQgetvalue(res, i, 2),
				  PQgetvalue(res, i, 3), PQgetvalue(res, i, 4));
	}
	PQclear(res);

	/*
	 * Session and transaction leases: once every client backend has gone,
	 * none is left but those released within their minimum hold.
	 */
	for (int i = 0; i < 100; i++)
	{
		res = load_must(conn, "SELECT count(*) FROM pg_stat_activity"
						" WHERE application_name ~ '^dlock_fuzz (c[0-9]+|observer)$'");
		waiting = atoi(PQgetvalue(res, 0, 0));
		PQclear(res);
		if (waiting == 0)
			break;
		load_sleep_us(100000);
	}
	if (waiting != 0)
	{
		bad++;
		violation(st, "%s: %d client backends still running 10 s after the end", db_list[d], waiting);
	}
	bad += check_bound_leases(conn, db_list[d], st);
	res = load_must(conn,
			   "SELECT format('\"%s\" token %s lifetime %s pid %s granted_at %s expires_at %s', name, token,"
			   " lifetime, pid, granted_at, expires_at) FROM dlock_locks"
			   " WHERE lifetime <> 'ttl' AND released_at IS NULL");
	for (int i = 0; i < PQntuples(res); i++)
	{
		bad++;
		violation(st, "%s: a lease outlived its session or transaction: %s", db_list[d], PQgetvalue(res, i, 0));
	}
	PQclear(res);

	/* a release within a hold keeps the lease until the hold's end, no longer */
	res = load_must(conn,
			   "SELECT format('\"%s\" token %s lifetime %s granted_at %s min_hold %s released_at %s expires_at %s',"
			   " name, token, lifetime, granted_at, min_hold, released_at, expires_at) FROM dlock_locks"
			   " WHERE released_at IS NOT NULL AND expires_at > granted_at + min_hold + interval '100 ms'");
	for (int i = 0; i < PQntuples(res); i++)
	{
		bad++;
		violation(st, "%s: a lease released within its hold lasts beyond the hold: %s", db_list[d], PQgetvalue(res, i, 0));
	}
	PQclear(res);

	/*
	 * Durable holds: after a sweep (which deletes the rows of leases that
	 * ended), every hold row has its lease row, and a durable live lease's
	 * min_hold and released_at are its hold row's.
	 */
	PQclear(load_must(conn, "SELECT dlock_sweep()"));
	if (inject)
		PQclear(load_must(conn, "INSERT INTO dlock_lease_holds VALUES ('injected', 1, '1 s', NULL)"));
	res = load_must(conn,
			   "SELECT format('\"%s\" token %s min_hold %s released_at %s', h.name, h.token, h.min_hold, h.released_at)"
			   " FROM dlock_lease_holds h LEFT JOIN dlock_leases r ON r.name = h.name AND r.token = h.token"
			   " WHERE r.name IS NULL");
	for (int i = 0; i < PQntuples(res); i++)
	{
		bad++;
		violation(st, "%s: a hold row without its lease row after a sweep: %s", db_list[d], PQgetvalue(res, i, 0));
	}
	PQclear(res);
	res = load_must(conn,
			   "SELECT format('\"%s\" token %s: memory: min_hold %s released_at %s; row: min_hold %s released_at %s',"
			   " l.name, l.token, l.min_hold, l.released_at, h.min_hold, h.released_at)"
			   " FROM dlock_locks l LEFT JOIN dlock_lease_holds h ON h.name = l.name AND h.token = l.token"
			   " WHERE l.durable AND (l.min_hold IS DISTINCT FROM h.min_hold"
			   " OR l.released_at IS DISTINCT FROM h.released_at)");
	for (int i = 0; i < PQntuples(res); i++)
	{
		bad++;
		violation(st, "%s: a durable lease's hold differs from its hold row: %s", db_list[d], PQgetvalue(res, i, 0));
	}
	PQclear(res);

	/* no row was written by an UPDATE that carried no token */
	res = load_must(conn, "SELECT count(*) FROM fz_rows WHERE stale");
	if (atoi(PQgetvalue(res, 0, 0)) != 0)
	{
		bad++;
		violation(st, "%s: %s rows of fz_rows were written by an UPDATE that set no token",
				  db_list[d], PQgetvalue(res, 0, 0));
	}
	PQclear(res);

	/* the sentinel is untouched */
	res = load_must(conn, "SELECT token::text, owner, role::text, version FROM dlock_locks WHERE name = 'sentinel'");
	if (PQntuples(res) != 1 || strcmp(PQgetvalue(res, 0, 0), sentinel_token) != 0 ||
		strcmp(PQgetvalue(res, 0, 1), "sentinel") != 0 || strcmp(PQgetvalue(res, 0, 3), "1") != 0)
	{
		bad++;
		violation(st, "%s: the sentinel lease changed (rows %d, token %s, expected %s)", db_list[d],
				  PQntuples(res), PQntuples(res) ? PQgetvalue(res, 0, 0) : "-", sentinel_token);
	}
	PQclear(res);

	/* the final state joins the token records */
	res = load_must(conn, "SELECT name, owner, role::text, token FROM dlock_locks");
	for (int i = 0; i < PQntuples(res); i++)
	{
		Record	   *r = &extra[(*nextra)++];

		r->token = load_int64(res, i, 3);
		r->t_send = r->t_recv = load_now_us();
		r->holder = holder_hash(db_list[d], PQgetvalue(res, i, 0), PQgetlength(res, i, 0),
								PQgetvalue(res, i, 1), PQgetlength(res, i, 1), PQgetvalue(res, i, 2));
		r->fresh = 0;
		r->kind = 2;
		if (*nextra >= 200000)
			break;
	}
	PQclear(res);
	PQfinish(conn);
	return bad;
}

static void hold_bound_leases(void);

/* Durable live leases of every database, for --verify after a restart. */
static void
write_snapshot(const char *path, int64_t max_token)
{
	FILE	   *f = fopen(path, "w");

	if (f == NULL)
	{
		perror(path);
		exit(2);
	}
	fprintf(f, "max_token %" PRId64 "\n", max_token);
	for (int d = 0; d < ndbs; d++)
	{
		PGconn	   *conn = checker_conn(db_list[d]);
		PGresult   *res;

		/*
		 * A release's commit is not waited for, nor a grant's of a ttl
		 * within dlock.failover_grace: flush the run's last ones, so that
		 * the snapshot is what a crash must bring back.
		 */
		/* durable leases with a minimum hold, one of them released within it */
		PQclear(load_must(conn, "SELECT dlock_try('hold-held', '1 hour', 'checker', min_hold => '10 min'),"
						  " dlock_try('hold-released', '1 hour', 'checker', min_hold => '10 min')"));
		PQclear(load_must(conn, "SELECT dlock_release('hold-released', 'checker')"));
		if (d == 0)
			PQclear(load_must(conn, "CHECKPOINT"));
		res = load_must(conn,
								"SELECT encode(convert_to(name, 'UTF8'), 'hex'), encode(convert_to(owner, 'UTF8'), 'hex'),"
								" role::text, token, expires_at > clock_timestamp() + interval '30 s',"
								" coalesce(extract(epoch FROM min_hold)::text, '-'), released_at IS NOT NULL"
								" FROM dlock_locks WHERE durable ORDER BY name");

		for (int i = 0; i < PQntuples(res); i++)
			fprintf(f, "lease %s %s %s %s %s %s %s %s\n", db_list[d], PQgetvalue(res, i, 0),
					PQgetvalue(res, i, 1), PQgetvalue(res, i, 2), PQgetvalue(res, i, 3),
					PQgetvalue(res, i, 4), PQgetvalue(res, i, 5), PQgetvalue(res, i, 6));
		PQclear(res);
		PQfinish(conn);
	}
	fclose(f);
	hold_bound_leases();
}

/*
 * For the restart: a process that holds session and transaction leases
 * (one of them released within its minimum hold, one the default owner's)
 * in every database until the server goes down, which kills their
 * connections (or for 5 minutes).  None may come back.
 */
static void
hold_bound_leases(void)
{
	int			pipefd[2];
	pid_t		pid;
	char		c;

	if (pipe(pipefd) != 0)
	{
		perror("pipe");
		exit(2);
	}
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0)
	{
		perror("fork");
		exit(2);
	}
	if (pid == 0)
	{
		PGconn	   *conns[MAX_DBS];
		int64_t		until = load_now_us() + 300000000;

		close(pipefd[0]);
		for (int d = 0; d < ndbs; d++)
		{
			conns[d] = checker_conn(db_list[d]);
			PQclear(load_must(conns[d],
							  "SELECT dlock_try('gone-session', '1 hour', 'checker-s', lifetime => 'session'),"
							  " dlock_try('gone-session-held', '1 hour', 'checker-s', lifetime => 'session',"
							  " min_hold => '10 min'), dlock_try('gone-default', '1 hour')"));
			PQclear(load_must(conns[d], "SELECT dlock_release('gone-session-held', 'checker-s')"));
			PQclear(load_must(conns[d], "BEGIN"));
			PQclear(load_must(conns[d],
							  "SELECT dlock_try('gone-xact', '1 hour', 'checker-x', lifetime => 'transaction'),"
							  " dlock_try('gone-xact-held', '1 hour', 'checker-x', lifetime => 'transaction',"
							  " min_hold => '10 min')"));
		}
		/* (nobody waits for this process's output) */
		if (write(pipefd[1], "r", 1) != 1)
			exit(2);
		close(pipefd[1]);
		if (freopen("/dev/null", "w", stdout) == NULL || freopen("/dev/null", "w", stderr) == NULL)
			exit(2);
		while (load_now_us() < until)
		{
			struct pollfd pfd[MAX_DBS];
			bool		gone = false;

			for (int d = 0; d < ndbs; d++)
				pfd[d] = (struct pollfd) {PQsocket(conns[d]), POLLIN, 0};
			poll(pfd, ndbs, 1000);
			for (int d = 0; d < ndbs; d++)
				gone |= !PQconsumeInput(conns[d]) || PQstatus(conns[d]) != CONNECTION_OK;
			if (gone)
				break;
		}
		exit(0);
	}
	close(pipefd[1]);
	if (read(pipefd[0], &c, 1) != 1)
	{
		fprintf(stderr, "dlock_fuzz: the holder of session and transaction leases failed\n");
		exit(2);
	}
	close(pipefd[0]);
}

/*
 * After a restart: every lease that had 30 s or more to live is back, with
 * its token, owner and role; no lease is back that was not live before; a
 * new grant is above every token issued before.  After a crash, leases of a
 * ttl within dlock.failover_grace may have been lost (their commits skip
 * the flush; none is long-lived) and a crash grace may run: while
 * dlock_grace() says it does, a fresh name is not granted; the new grant
 * waits for its end.
 */
static int
verify_snapshot(const char *path)
{
	FILE	   *f = fopen(path, "r");
	char		line[2048];
	int64_t		max_token = 0;
	long		bad = 0,
				expected_back = 0,
				back = 0,
				in_grace = 0;
	Stats		st = {0};

	if (f == NULL)
	{
		perror(path);
		return 2;
	}
	if (fgets(line, sizeof(line), f) == NULL || sscanf(line, "max_token %" SCNd64, &max_token) != 1)
	{
		fprintf(stderr, "dlock_fuzz: %s: no max_token line\n", path);
		return 2;
	}
	for (int d = 0; d < ndbs; d++)
	{
		PGconn	   *conn = checker_conn(db_list[d]);
		PGresult   *res = load_must(conn,
								"SELECT encode(convert_to(name, 'UTF8'), 'hex'), encode(convert_to(owner, 'UTF8'), 'hex'),"
								" role::text, token, coalesce(extract(epoch FROM min_hold)::text, '-'),"
								" released_at IS NOT NULL FROM dlock_locks ORDER BY name");
		int			nrows = PQntuples(res);
		bool	   *matched = calloc(nrows + 1, sizeof(bool));
		char		tok[64];

		rewind(f);
		if (fgets(line, sizeof(line), f) == NULL)
			break;
		while (fgets(line, sizeof(line), f) != NULL)
		{
			char		db[128],
						name[1024],
						owner[1024],
						role[128],
						longlived[8],
						min_hold[64],
						released[8];
			int64_t		token;
			bool		found = false;

			if (sscanf(line, "lease %127s %1023s %1023s %127s %" SCNd64 " %7s %63s %7s",
					   db, name, owner, role, &token, longlived, min_hold, released) != 8 ||
				strcmp(db, db_list[d]) != 0)
				continue;
			snprintf(tok, sizeof(tok), "%" PRId64, token);
			for (int i = 0; i < nrows; i++)
			{
				if (strcmp(PQgetvalue(res, i, 0), name) == 0 &&
					strcmp(PQgetvalue(res, i, 1), owner) == 0 &&
					strcmp(PQgetvalue(res, i, 2), role) == 0 &&
					strcmp(PQgetvalue(res, i, 3), tok) == 0)
				{
					matched[i] = found = true;
					back++;
					/* with its minimum hold, released within it or not */
					if (strcmp(PQgetvalue(res, i, 4), min_hold) != 0 ||
						strcmp(PQgetvalue(res, i, 5), released) != 0)
					{
						bad++;
						violation(&st, "%s: lease on name (hex) %s token %s came back with min_hold %s,"
								  " released %s; it had %s, released %s", db, name, tok,
								  PQgetvalue(res, i, 4), PQgetvalue(res, i, 5), min_hold, released);
					}
				}
			}
			if (strcmp(longlived, "t") == 0)
			{
				expected_back++;
				if (!found)
				{
					bad++;
					violation(&st, "%s: lease on name (hex) %s token %" PRId64 " did not come back after the restart",
							  db, name, token);
				}
			}
		}
		for (int i = 0; i < nrows; i++)
		{
			if (!matched[i] && strcmp(PQgetvalue(res, i, 0), "73656e74696e656c") != 0)
			{
				bad++;
				violation(&st, "%s: after the restart, lease on name (hex) %s token %s was not live before",
						  db_list[d], PQgetvalue(res, i, 0), PQgetvalue(res, i, 3));
			}
		}
		free(matched);
		PQclear(res);

		/* no session or transaction lease comes back (gone-*: held through the restart) */
		res = load_must(conn, "SELECT format('\"%s\" token %s lifetime %s', name, token, lifetime)"
						" FROM dlock_locks WHERE lifetime <> 'ttl' OR name LIKE 'gone-%'");
		for (int i = 0; i < PQntuples(res); i++)
		{
			bad++;
			violation(&st, "%s: a session or transaction lease came back after the restart: %s",
					  db_list[d], PQgetvalue(res, i, 0));
		}
		PQclear(res);

		/* (the try first: the grace still ran after it was refused) */
		res = load_must(conn, "SELECT dlock_try('during-grace', '1 s', 'checker'),"
						" coalesce(dlock_grace() > clock_timestamp(), false)");
		if (strcmp(PQgetvalue(res, 0, 1), "t") == 0)
		{
			in_grace++;
			if (!PQgetisnull(res, 0, 0))
			{
				bad++;
				violation(&st, "%s: a fresh name was granted (token %s) during the crash grace",
						  db_list[d], PQgetvalue(res, 0, 0));
			}
		}
		PQclear(res);
		PQclear(load_must(conn, "SELECT dlock_release('during-grace', 'checker')"));

		res = load_must(conn, "SELECT dlock_acquire('after-restart', '1 s', '1 min', 'checker')");
		if (PQgetisnull(res, 0, 0) || load_int64(res, 0, 0) <= max_token)
		{
			bad++;
			violation(&st, "%s: a grant after the restart got token %s, not above %" PRId64,
					  db_list[d], PQgetvalue(res, 0, 0), max_token);
		}
		PQclear(res);
		PQfinish(conn);
	}
	fclose(f);
	printf("restart: a crash grace ran at the check in %ld of %d databases\n", in_grace, ndbs);
	printf("restart: %ld of %ld long-lived durable leases back (%ld leases back in all), %ld violations\n",
		   back >= expected_back ? expected_back : back, expected_back, back, bad);
	printf("RESULT: %s\n", bad ? "FAIL" : "PASS");
	return bad ? 1 : 0;
}

/* The leases live now in every database (their tokens), into *live. */
static size_t
live_tokens(PGconn **conns, EvTok **live)
{
	size_t		n = 0;

	for (int d = 0; d < ndbs; d++)
	{
		PGresult   *res = load_must(conns[d], "SELECT token FROM dlock_locks");

		*live = realloc(*live, sizeof(EvTok) * (n + PQntuples(res) + 1));
		for (int i = 0; i < PQntuples(res); i++)
		{
			(*live)[n].token = load_int64(res, i, 0);
			(*live)[n++].db = (uint8_t) d;
		}
		PQclear(res);
	}
	return n;
}

/*
 * After the run: waits (10 s at most) until the events received so far
 * agree with what the clients know and with the leases live now (every
 * lease that ended has sent its end), then stops the listener and checks
 * the whole stream against those live leases (later events can only end
 * more of them).
 */
static Report
check_all_events(pid_t listener, int *lstatus, Stats *cst, long *nevents, long *kinds, long *ntagged)
{
	long		known[MAX_CLIENTS] = {0},
				uncertain[MAX_CLIENTS] = {0};
	EvTok	   *tags = NULL,
			   *live = NULL;
	size_t		ntags = 0,
				nlive = 0;
	PGconn	   *conns[MAX_DBS];
	Event	   *copy = NULL;
	Report		r = {0};
	int			n;

	for (int c = 0; c < opts.clients; c++)
	{
		known[c] = stats[c].ev_known;
		uncertain[c] = stats[c].ev_uncertain;
		tags = realloc(tags, sizeof(EvTok) * (ntags + stats[c].nevtoks + 1));
		memcpy(tags + ntags, evtoks + (size_t) c * EVTOKS_PER, sizeof(EvTok) * stats[c].nevtoks);
		ntags += stats[c].nevtoks;
	}
	*ntagged = (long) ntags;
	if (inject)
	{
		/* a grant "rolled back" that sent its event, or one committed that never did */
		n = __atomic_load_n(&listen_state->nevents, __ATOMIC_ACQUIRE);
		tags[ntags] = (EvTok) {1, 0, TAG_K, LT_TTL};
		for (int i = 0; i < n; i++)
			if (events[i].kind == EV_GRANTED)
			{
				tags[ntags] = (EvTok) {events[i].token, events[i].db, TAG_R, 0};
				break;
			}
		ntags++;
	}
	for (int d = 0; d < ndbs; d++)
		conns[d] = checker_conn(db_list[d]);
	for (int round = 0; round < 100; round++)
	{
		n = __atomic_load_n(&listen_state->nevents, __ATOMIC_ACQUIRE);
		nlive = live_tokens(conns, &live);
		copy = realloc(copy, sizeof(Event) * (n + 1));
		memcpy(copy, events, sizeof(Event) * n);
		r = (Report) {0};
		check_events(copy, n, tags, ntags, known, uncertain, opts.clients, live, nlive, &r);
		if (r.bad == 0)
			break;
		load_sleep_us(100000);
	}
	for (int d = 0; d < ndbs; d++)
		PQfinish(conns[d]);

	__atomic_store_n(&listen_state->stop, 1, __ATOMIC_RELEASE);
	waitpid(listener, lstatus, 0);
	n = listen_state->nevents;
	copy = realloc(copy, sizeof(Event) * (n + 1));
	memcpy(copy, events, sizeof(Event) * n);
	for (int i = 0; i < n; i++)
		kinds[copy[i].kind]++;
	*nevents = n;
	r = (Report) {.st = cst};
	check_events(copy, n, tags, ntags, known, uncertain, opts.clients, live, nlive, &r);
	if (n >= MAX_EVENTS)
		ev_fail(&r, "more than %d events: the rest were not kept", MAX_EVENTS);
	if (listen_state->lost_conn || !WIFEXITED(*lstatus) || WEXITSTATUS(*lstatus) != 0)
		ev_fail(&r, "the listener lost a connection or died (events may be missing)");
	if (listen_state->malformed)
		ev_fail(&r, "%d malformed payloads, the first: %s", listen_state->malformed, listen_state->bad_payload);
	free(copy);
	free(live);
	free(tags);
	return r;
}

static bool child_hung[MAX_CLIENTS + 1];

static void
note_hung(int i, pid_t pid)
{
	(void) pid;
	child_hung[i] = true;
}

static int
fuzz_main(void)
{
	int64_t		start,
				deadline;
	pid_t		pids[MAX_CLIENTS + 1];
	int			status[MAX_CLIENTS + 1];
	int			hung,
				died = 0;
	long		bad = 0;
	Stats		total = {0};
	Stats		cst = {0};
	char		sentinel_tokens[MAX_DBS][32];
	int64_t		max_token = 0;
	long		nfresh = 0;
	size_t		nall = 0,
				nextra = 0;
	Record	   *all;
	Record	   *extra = calloc(200000, sizeof(Record));
	pid_t		listener;
	int			lstatus = 0;
	Report		evr;
	long		nevents_seen = 0,
				nevtags = 0,
				kinds[EV_BAD + 1] = {0};

	stats = load_shared(sizeof(Stats) * (MAX_CLIENTS + 1), false);
	records = load_shared(sizeof(Record) * (size_t) RECORDS_PER * (MAX_CLIENTS + 1), true);
	evtoks = load_shared(sizeof(EvTok) * (size_t) EVTOKS_PER * MAX_CLIENTS, true);
	events = load_shared(sizeof(Event) * (size_t) MAX_EVENTS, true);
	listen_state = load_shared(sizeof(Listen), false);

	/* the sentinel: the same token in every database is impossible, so one each */
	for (int d = 0; d < ndbs; d++)
	{
		PGconn	   *conn = checker_conn(db_list[d]);
		PGresult   *res;

		PQclear(load_must(conn, "SELECT dlock_force_release('sentinel')"));
		/* with its row at once: the check reads its version */
		res = load_must(conn, "SELECT dlock_try('sentinel', '1 hour', 'sentinel')"
						" FROM (SELECT set_config('dlock.defer_rows', 'off', true)) s");
		if (PQgetisnull(res, 0, 0))
		{
			fprintf(stderr, "dlock_fuzz: cannot take the sentinel in %s\n", db_list[d]);
			return 2;
		}
		snprintf(sentinel_tokens[d], sizeof(sentinel_tokens[d]), "%s", PQgetvalue(res, 0, 0));
		PQclear(res);
		PQfinish(conn);
	}

	printf("dlock_fuzz: %d clients, %d s, seed %" PRIu64 ", %d databases, %d roles, %d tracked names\n",
		   opts.clients, opts.seconds, opts.seed, ndbs, nroles, opts.names);
	fflush(stdout);
	start = load_now_us();
	deadline = start + (int64_t) opts.seconds * 1000000;
	run_nonce = (unsigned) (start ^ getpid()) & 0xffffff;

	/* the event listener, listening before any client starts */
	fflush(stdout);
	fflush(stderr);
	listener = fork();
	if (listener < 0)
	{
		perror("fork");
		return 2;
	}
	if (listener == 0)
		listener_main();
	while (!__atomic_load_n(&listen_state->ready, __ATOMIC_ACQUIRE))
	{
		if (waitpid(listener, &lstatus, WNOHANG) == listener)
		{
			fprintf(stderr, "dlock_fuzz: the event listener could not start\n");
			return 2;
		}
		load_sleep_us(10000);
	}
	for (int i = 0; i <= opts.clients; i++)
	{
		int			slot = i < opts.clients ? i : MAX_CLIENTS;

		fflush(stdout);
		fflush(stderr);
		pids[i] = fork();
		if (pids[i] < 0)
		{
			perror("fork");
			return 2;
		}
		if (pids[i] == 0)
		{
			if (slot == MAX_CLIENTS)
				monitor_main(deadline);
			client_main(i, deadline);
		}
	}

	/* wait for everyone; 30 s after the end a client is hung */
	hung = load_reap(opts.clients + 1, pids, status, deadline + 30000000, note_hung);
	for (int i = 0; i <= opts.clients; i++)
		if (!child_hung[i] && (!WIFEXITED(status[i]) || WEXITSTATUS(status[i]) != 0))
			died++;

	for (int i = 0; i <= opts.clients; i++)
	{
		Stats	   *s = &stats[i < opts.clients ? i : MAX_CLIENTS];

		total.calls += s->calls;
		total.dlock_calls += s->dlock_calls;
		total.ok += s->ok;
		total.errors += s->errors;
		total.unexpected += s->unexpected;
		total.grants += s->grants;
		total.fresh += s->fresh;
		total.nulls += s->nulls;
		total.xacts += s->xacts;
		total.rollbacks += s->rollbacks;
		total.savepoint_rollbacks += s->savepoint_rollbacks;
		total.prepares += s->prepares;
		total.cancels += s->cancels;
		total.hangups += s->hangups;
		total.terminations += s->terminations;
		total.reconnects += s->reconnects;
		total.floods += s->floods;
		total.hostile_names += s->hostile_names;
		total.big_args += s->big_args;
		total.stale_sent += s->stale_sent;
		total.stale_refused += s->stale_refused;
		total.stale_no_row += s->stale_no_row;
		total.lt_session += s->lt_session;
		total.lt_xact += s->lt_xact;
		total.lt_default_session += s->lt_default_session;
		total.min_holds += s->min_holds;
		total.xact_checks += s->xact_checks;
		total.events_on += s->events_on;
		total.ev_known += s->ev_known;
		total.ev_uncertain += s->ev_uncertain;
		total.ev_rolled_back += s->ev_rolled_back;
		total.ev_off += s->ev_off;
		total.enqueues += s->enqueues;
		total.enqueue_nulls += s->enqueue_nulls;
		total.queued_tokens += s->queued_tokens;
		total.dequeues += s->dequeues;
		total.dequeued += s->dequeued;
		total.violations += s->violations;
		for (int k = 0; k < s->ncodes; k++)
		{
			int			j;

			for (j = 0; j < total.ncodes; j++)
				if (strcmp(total.codes[j].code, s->codes[k].code) == 0)
					break;
			if (j == total.ncodes && total.ncodes < MAX_CODES)
			{
				memcpy(total.codes[j].code, s->codes[k].code, 6);
				total.ncodes++;
			}
			if (j < MAX_CODES)
				total.codes[j].n += s->codes[k].n;
		}
	}

	/* a row written past the trigger, as a stale UPDATE would have */
	for (int d = 0; inject && d < ndbs; d++)
	{
		PGconn	   *conn = checker_conn(db_list[d]);

		PQclear(load_must(conn, "SET session_replication_role = replica"));
		PQclear(load_must(conn, "INSERT INTO fz_rows VALUES ('injected', 0, true)"));
		PQfinish(conn);
	}

	/* quiescent state, database by database */
	for (int d = 0; d < ndbs; d++)
		bad += check_quiescent(d, &cst, sentinel_tokens[d], extra, &nextra);

	/* change events, once every end due has had time to arrive */
	evr = check_all_events(listener, &lstatus, &cst, &nevents_seen, kinds, &nevtags);
	bad += evr.bad;

	/* tokens */
	for (int i = 0; i <= opts.clients; i++)
		nall += stats[i < opts.clients ? i : MAX_CLIENTS].nrecords;
	all = malloc(sizeof(Record) * (nall + nextra + 3));
	nall = 0;
	for (int i = 0; i <= opts.clients; i++)
	{
		int			slot = i < opts.clients ? i : MAX_CLIENTS;

		memcpy(all + nall, records + (size_t) slot * RECORDS_PER, sizeof(Record) * stats[slot].nrecords);
		nall += stats[slot].nrecords;
	}
	memcpy(all + nall, extra, sizeof(Record) * nextra);
	nall += nextra;
	if (inject && nall > 0)
	{
		/* a token returned to another holder, and a "new" grant below an older one */
		Record		r1 = all[0],
					r2 = all[0];

		r1.holder ^= 1;
		r1.kind = 9;
		r2.fresh = 1;
		r2.t_send = load_now_us();
		r2.t_recv = r2.t_send + 1;
		r2.token = 1;
		r2.holder = 42;
		all[nall++] = r1;
		all[nall++] = r2;
	}
	bad += check_tokens(all, nall, &cst, &max_token, &nfresh);

	/* a fresh grant is above everything seen */
	for (int d = 0; d < ndbs; d++)
	{
		PGconn	   *conn = checker_conn(db_list[d]);
		PGresult   *res = load_must(conn, "SELECT dlock_try('after-fuzz', '1 s', 'checker')");

		if (PQgetisnull(res, 0, 0) || load_int64(res, 0, 0) <= max_token)
		{
			bad++;
			violation(&cst, "%s: a grant after the run got token %s, not above %" PRId64,
					  db_list[d], PQgetvalue(res, 0, 0), max_token);
		}
		PQclear(res);
		PQfinish(conn);
	}
	if (snapshot_file)
		write_snapshot(snapshot_file, max_token);

	if (verbose)
	{
		for (int i = 0; i < opts.clients; i++)
			printf("client %-3d     %ld statements, %ld errors, %ld tokens (%ld new), %ld reconnects\n",
				   i, stats[i].calls, stats[i].errors, stats[i].grants, stats[i].fresh,
				   stats[i].reconnects);
	}
	printf("seconds        %.1f\n", (load_now_us() - start) / 1e6);
	printf("statements     %ld (%ld dlock calls; %.0f statements/s during the run)\n",
		   total.calls, total.dlock_calls, total.calls / (double) opts.seconds);
	printf("results        %ld ok, %ld errors, %ld unexpected errors\n", total.ok, total.errors, total.unexpected);
	printf("tokens         %ld returned (%ld certainly new grants, checked for order), %ld NULL from try/acquire\n",
		   total.grants, total.fresh, total.nulls);
	printf("transactions   %ld (%ld rolled back, %ld savepoint rollbacks, %ld PREPARE TRANSACTION)\n",
		   total.xacts, total.rollbacks, total.savepoint_rollbacks, total.prepares);
	printf("chaos          %ld cancels, %ld hang-ups, %ld terminations, %ld reconnects, %ld floods\n",
		   total.cancels, total.hangups, total.terminations, total.reconnects, total.floods);
	printf("hostile names  %ld (%ld arguments of 1 MB)\n", total.hostile_names, total.big_args);
	printf("stale writes   %ld UPDATEs that set no token, unfenced (%ld refused with DL001, %ld matched no row)\n",
		   total.stale_sent, total.stale_refused, total.stale_no_row);
	printf("lifetimes      %ld session, %ld transaction, %ld session by default (the session's own owner);"
		   " %ld with a minimum hold; %ld transaction leases looked for after their transaction\n",
		   total.lt_session, total.lt_xact, total.lt_default_session, total.min_holds, total.xact_checks);
	printf("events         %ld received (granted %ld, released %ld, forced %ld, expired %ld, ended %ld, lost %ld)"
		   " from %ld sessions with dlock.events on\n",
		   nevents_seen, kinds[EV_GRANTED], kinds[EV_RELEASED], kinds[EV_FORCED], kinds[EV_EXPIRED],
		   kinds[EV_ENDED], kinds[EV_LOST], total.events_on);
	printf("event tokens   %ld tagged: %ld committed new grants (each sent), %ld rolled back and %ld with events off"
		   " (none sent); %ld grant calls of unknown outcome\n",
		   nevtags, total.ev_known, total.ev_rolled_back, total.ev_off, total.ev_uncertain);
	printf("queue          %ld dlock_enqueue (%ld returned NULL: queued), %ld dlock_dequeue (%ld left the queue);"
		   " %ld tokens to holders with a request queued; %ld requests left queued at the end, dequeued by the checker\n",
		   total.enqueues, total.enqueue_nulls, total.dequeues, total.dequeued, total.queued_tokens,
		   cst.leftover_queued);
	printf("monitor        %ld samples of dlock_locks\n", stats[MAX_CLIENTS].calls);
	printf("records        %zu token records checked (%ld as new grants), max token %" PRId64 "\n",
		   nall, nfresh, max_token);
	printf("sqlstates     ");
	for (int j = 0; j < total.ncodes; j++)
		printf(" %s:%ld", total.codes[j].code, total.codes[j].n);
	printf("\n");
	printf("violations     %ld (clients %ld, checker %ld); clients died %d, hung %d\n",
		   total.violations + cst.violations + (long) died + hung, total.violations, bad, died, hung);
	bad += total.violations + died + hung;
	printf("RESULT: %s\n", bad ? "FAIL" : "PASS");
	free(all);
	free(extra);
	return bad ? 1 : 0;
}

/* ------------------------------------------------------------------ herd */

typedef struct Waiter
{
	PGconn	   *conn;
	int			pid;
	int			position;		/* in dlock_waiters, 1 = next */
	int			fate;			/* storm: 0 wait, 1 stmt timeout, 2 own timeout, 3 cancel, 4 hang up, 5 terminate */
	bool		done;
	int64_t		token;
	char		code[6];
	bool		null_result;
	bool		released;
} Waiter;

static int
herd_main(void)
{
	PGconn	   *ctl = checker_conn(db_list[0]);
	PGresult   *res;
	Waiter	   *w = calloc(herd, sizeof(Waiter));
	char		sql[512];
	int64_t		holder_token;
	int64_t		t0;
	int			queued = 0,
				bad = 0,
				granted = 0,
				timed_out = 0,
				nulls = 0,
				cancelled = 0,
				gone = 0,
				other = 0;
	int			mode = strcmp(herd_mode, "chain") == 0 ? 0 : strcmp(herd_mode, "timeout") == 0 ? 1 : 2;
	int64_t		last_token = 0;
	int			last_pos = 0;

	rng_state = opts.seed;
	snprintf(sql, sizeof(sql), "SELECT dlock_try('%s', '10 min', 'herd-holder')", herd_name);
	res = load_must(ctl, sql);
	if (PQgetisnull(res, 0, 0))
	{
		fprintf(stderr, "herd: %s is held by someone else\n", herd_name);
		return 2;
	}
	holder_token = load_int64(res, 0, 0);
	PQclear(res);

	t0 = load_now_us();
	for (int i = 0; i < herd; i++)
	{
		char		app[32];
		const char *role = nroles ? role_list[i % nroles] : NULL;

		snprintf(app, sizeof(app), "herd %d", i);
		w[i].conn = connect_as(db_list[0], role, app);
		if (PQstatus(w[i].conn) != CONNECTION_OK)
		{
			fprintf(stderr, "herd: connection %d failed: %s", i, PQerrorMessage(w[i].conn));
			return 2;
		}
		w[i].pid = PQbackendPID(w[i].conn);
		w[i].fate = mode == 1 ? 1 : mode == 0 ? 0 : rnd_int(6);
		if (w[i].fate == 1)
			snprintf(sql, sizeof(sql), "SET statement_timeout = %d", mode == 1 ? herd_timeout_ms : 20 + rnd_int(herd_timeout_ms));
		else
			snprintf(sql, sizeof(sql), "SET statement_timeout = 0");
		PQclear(load_must(w[i].conn, sql));
	}
	printf("herd: %d sessions connected in %.1f s\n", herd, (load_now_us() - t0) / 1e6);

	/* queue them, one after the other, in a known order */
	t0 = load_now_us();
	for (int i = 0; i < herd; i++)
	{
		char		tmo[32] = "NULL";

		if (w[i].fate == 2)
			snprintf(tmo, sizeof(tmo), "'%d ms'", 20 + rnd_int(herd_timeout_ms));
		snprintf(sql, sizeof(sql), "SELECT dlock_acquire('%s', '10 min', %s, 'w%d')", herd_name, tmo, i);
		if (!PQsendQuery(w[i].conn, sql))
		{
			fprintf(stderr, "herd: send %d failed: %s", i, PQerrorMessage(w[i].conn));
			return 2;
		}
	}
	/* everyone who is not meant to leave early must be queued */
	for (;;)
	{
		snprintf(sql, sizeof(sql), "SELECT pid, queue_position FROM dlock_waiters WHERE name = '%s'", herd_name);
		res = load_must(ctl, sql);
		queued = PQntuples(res);
		if (queued == herd || (mode != 0 && load_now_us() - t0 > 2000000) || load_now_us() - t0 > 60000000)
		{
			for (int r = 0; r < PQntuples(res); r++)
			{
				int			pid = atoi(PQgetvalue(res, r, 0));

				for (int i = 0; i < herd; i++)
					if (w[i].pid == pid)
						w[i].position = atoi(PQgetvalue(res, r, 1));
			}
			PQclear(res);
			break;
		}
		PQclear(res);
		load_sleep_us(20000);
	}
	printf("herd: %d of %d sessions seen queued after %.1f s\n", queued, herd, (load_now_us() - t0) / 1e6);
	if (mode == 0 && queued != herd)
	{
		printf("herd: VIOLATION: only %d of %d queued\n", queued, herd);
		bad++;
	}

	/* storm: cancel, hang up and terminate some of them now */
	if (mode == 2)
	{
		for (int i = 0; i < herd; i++)
		{
			if (w[i].fate == 3)
				load_cancel(w[i].conn);
			else if (w[i].fate == 4)
			{
				PQfinish(w[i].conn);
				w[i].conn = NULL;
				w[i].done = true;
				gone++;
			}
			else if (w[i].fate == 5)
			{
				snprintf(sql, sizeof(sql), "SELECT pg_terminate_backend(%d)", w[i].pid);
				PQclear(load_must(ctl, sql));
			}
		}
		load_sleep_us((int64_t) herd_timeout_ms * 1000 + 500000);
	}

	/* chain and storm: free the name; each waiter releases on grant */
	if (mode != 1)
	{
		snprintf(sql, sizeof(sql), "SELECT dlock_release('%s', 'herd-holder', %" PRId64 ")", herd_name, holder_token);
		res = load_must(ctl, sql);
		if (strcmp(PQgetvalue(res, 0, 0), "t") != 0)
		{
			printf("herd: VIOLATION: the holder could not release\n");
			bad++;
		}
		PQclear(res);
	}

	/* collect every outcome */
	t0 = load_now_us();
	for (;;)
	{
		int			pending = 0;

		for (int i = 0; i < herd; i++)
		{
			PGresult   *r;

			if (w[i].done)
				continue;
			if (!PQconsumeInput(w[i].conn) && PQstatus(w[i].conn) != CONNECTION_OK)
			{
				w[i].done = true;
				snprintf(w[i].code, sizeof(w[i].code), "conn");
				continue;
			}
			if (PQisBusy(w[i].conn))
			{
				pending++;
				continue;
			}
			while ((r = PQgetResult(w[i].conn)) != NULL)
			{
				if (PQresultStatus(r) == PGRES_TUPLES_OK)
				{
					if (PQgetisnull(r, 0, 0))
						w[i].null_result = true;
					else if (w[i].token == 0)
						w[i].token = load_int64(r, 0, 0);
				}
				else if (PQresultStatus(r) == PGRES_FATAL_ERROR)
					snprintf(w[i].code, sizeof(w[i].code), "%s", load_sqlstate(r, "?????"));
				PQclear(r);
			}
			if (w[i].token != 0 && !w[i].released)
			{
				/* pass it on */
				snprintf(sql, sizeof(sql), "SELECT dlock_release('%s', 'w%d', %" PRId64 ")", herd_name, i, w[i].token);
				PQsendQuery(w[i].conn, sql);
				w[i].released = true;
				pending++;
				continue;
			}
			w[i].done = true;
		}
		if (pending == 0)
			break;
		if (load_now_us() - t0 > 120000000)
		{
			printf("herd: VIOLATION: %d sessions still busy after 120 s\n", pending);
			bad++;
			break;
		}
		load_sleep_us(2000);
	}
	printf("herd: outcomes collected after %.1f s\n", (load_now_us() - t0) / 1e6);

	/* grants in queue order: tokens grow with the queue position */
	for (int pos = 1; pos <= herd; pos++)
	{
		for (int i = 0; i < herd; i++)
		{
			if (w[i].position != pos || w[i].token == 0)
				continue;
			if (w[i].token <= last_token)
			{
				if (bad < 10)
					printf("herd: VIOLATION: waiter at position %d got token %" PRId64 ", not above %" PRId64 " of position %d\n",
						   pos, w[i].token, last_token, last_pos);
				bad++;
			}
			last_token = w[i].token;
			last_pos = pos;
		}
	}
	for (int i = 0; i < herd; i++)
	{
		if (w[i].token != 0)
			granted++;
		else if (w[i].null_result)
			nulls++;
		else if (strcmp(w[i].code, "57014") == 0)
		{
			if (w[i].fate == 3)
				cancelled++;
			else
				timed_out++;
		}
		else if (w[i].fate == 4 || w[i].fate == 5)
			;
		else
			other++;
		if (w[i].fate == 5 && w[i].token == 0)
			gone++;

		/* what each fate must end in */
		if ((mode == 0 || w[i].fate == 0) && w[i].token == 0)
		{
			if (bad < 10)
				printf("herd: VIOLATION: waiter %d (position %d) was never granted (%s)\n", i, w[i].position, w[i].code);
			bad++;
		}
		if (mode == 1 && strcmp(w[i].code, "57014") != 0)
		{
			if (bad < 10)
				printf("herd: VIOLATION: waiter %d ended with %s, not a statement timeout\n", i,
					   w[i].token ? "a grant" : w[i].code);
			bad++;
		}
		/* hung-up and terminated sessions end however their connection does */
		if (w[i].code[0] != '\0' && strcmp(w[i].code, "57014") != 0 &&
			w[i].fate != 4 && w[i].fate != 5)
		{
			if (bad < 10)
				printf("herd: VIOLATION: waiter %d (fate %d) failed with SQLSTATE %s\n", i, w[i].fate, w[i].code);
			bad++;
		}
	}
	printf("herd: %d granted, %d timed out, %d NULL (own timeout), %d cancelled, %d hung up or terminated, %d other\n",
		   granted, timed_out, nulls, cancelled, gone, other);

	/* nobody is left queued; the holder is intact or the name is free */
	for (int i = 0; i < 100; i++)
	{
		res = load_must(ctl, "SELECT count(*) FROM dlock_waiters");
		queued = atoi(PQgetvalue(res, 0, 0));
		PQclear(res);
		if (queued == 0)
			break;
		load_sleep_us(100000);
	}
	if (queued != 0)
	{
		printf("herd: VIOLATION: %d sessions still in dlock_waiters\n", queued);
		bad++;
	}
	snprintf(sql, sizeof(sql), "SELECT owner, token FROM dlock_locks WHERE name = '%s'", herd_name);
	res = load_must(ctl, sql);
	if (mode == 1)
	{
		if (PQntuples(res) != 1 || strcmp(PQgetvalue(res, 0, 0), "herd-holder") != 0 ||
			load_int64(res, 0, 1) != holder_token)
		{
			printf("herd: VIOLATION: the holder's lease did not survive the storm\n");
			bad++;
		}
		PQclear(res);
		snprintf(sql, sizeof(sql), "SELECT dlock_release('%s', 'herd-holder')", herd_name);
		PQclear(load_must(ctl, sql));
	}
	else
	{
		if (PQntuples(res) != 0)
		{
			printf("herd: VIOLATION: %s is still held by %s\n", herd_name, PQgetvalue(res, 0, 0));
			bad++;
		}
		PQclear(res);
	}
	res = load_must(ctl, "SELECT waiting FROM dlock_stats");
	if (atoi(PQgetvalue(res, 0, 0)) != 0)
	{
		printf("herd: VIOLATION: dlock_stats.waiting is %s\n", PQgetvalue(res, 0, 0));
		bad++;
	}
	PQclear(res);
	/* usable again */
	snprintf(sql, sizeof(sql), "SELECT dlock_try('%s', '1 s', 'after-herd') IS NOT NULL"
			 " AND dlock_release('%s', 'after-herd')", herd_name, herd_name);
	res = load_must(ctl, sql);
	if (strcmp(PQgetvalue(res, 0, 0), "t") != 0)
	{
		printf("herd: VIOLATION: %s is not usable afterwards\n", herd_name);
		bad++;
	}
	PQclear(res);

	for (int i = 0; i < herd; i++)
		if (w[i].conn)
			PQfinish(w[i].conn);
	PQfinish(ctl);
	printf("RESULT: %s\n", bad ? "FAIL" : "PASS");
	return bad ? 1 : 0;
}

/* ------------------------------------------------------------------ main */

static void
usage(void)
{
	fprintf(stderr,
			"usage: dlock_fuzz [options]\n"
			"  -d, --conninfo STR     connection string of the checker (a superuser)\n"
			"  -D, --dbs A,B          databases the clients use (default: the conninfo's)\n"
			"  -r, --roles R1,R2      roles the clients connect as\n"
			"  -c, --clients N        client processes (12)\n"
			"  -t, --duration S       seconds (20)\n"
			"  -s, --seed N           seed (1)\n"
			"  -n, --names N          tracked names n0..n<N-1> (48)\n"
			"  -T, --max-statement-timeout MS  clients' statement_timeout is 50..MS (500)\n"
			"      --snapshot FILE    write the durable live leases after the run\n"
			"      --verify FILE      check them after a restart (no fuzzing)\n"
			"      --herd N           queue N waiters instead of fuzzing\n"
			"      --herd-name NAME   the name they wait on (herd)\n"
			"      --herd-mode M      chain, timeout or storm (chain)\n"
			"      --herd-timeout MS  statement_timeout and own timeouts (300)\n"
			"      --inject-violations  add bogus token records, a stale row, an orphan hold row and a\n"
			"                         bogus event tag: the run must FAIL\n"
			"      --self-test        the event checker on a valid and on doctored event streams\n"
			"  -v, --verbose          one line per client\n");
	exit(2);
}

int
main(int argc, char **argv)
{
	static const struct option longopts[] = {
		LOAD_LONG_OPTIONS,
		{"dbs", required_argument, NULL, 'D'},
		{"roles", required_argument, NULL, 'r'},
		{"max-statement-timeout", required_argument, NULL, 'T'},
		{"snapshot", required_argument, NULL, 1},
		{"verify", required_argument, NULL, 2},
		{"herd", required_argument, NULL, 3},
		{"herd-name", required_argument, NULL, 4},
		{"herd-mode", required_argument, NULL, 5},
		{"herd-timeout", required_argument, NULL, 6},
		{"verbose", no_argument, NULL, 'v'},
		{"inject-violations", no_argument, NULL, 7},
		{"self-test", no_argument, NULL, 8},
		{NULL, 0, NULL, 0}
	};
	int			o;

	load_must_fmt = "dlock_fuzz: query failed: %s\n  %s";
	while ((o = getopt_long(argc, argv, "d:D:r:c:t:s:n:T:v", longopts, NULL)) != -1)
	{
		switch (o)
		{
			case 'D':
				split_list(optarg, db_list, &ndbs, MAX_DBS);
				break;
			case 'r':
				split_list(optarg, role_list, &nroles, MAX_ROLES);
				break;
			case 'T':
				stmt_timeout_max_ms = atoi(optarg);
				break;
			case 1:
				snapshot_file = optarg;
				break;
			case 2:
				verify_file = optarg;
				break;
			case 3:
				herd = atoi(optarg);
				break;
			case 4:
				herd_name = optarg;
				break;
			case 5:
				herd_mode = optarg;
				break;
			case 6:
				herd_timeout_ms = atoi(optarg);
				break;
			case 'v':
				verbose = true;
				break;
			case 7:
				inject = true;
				break;
			case 8:
				return events_self_test();
			default:
				if (!load_option(&opts, o, optarg))
					usage();
		}
	}
	if (opts.clients < 1 || opts.clients > MAX_CLIENTS || opts.seconds < 1 || opts.names < 1 ||
		opts.names > MAX_TRACKED || stmt_timeout_max_ms < 100)
		usage();
	if (ndbs == 0)
	{
		static char dflt[] = "";

		db_list[ndbs++] = dflt;
	}
	if (nroles == 0 && !herd)
	{
		fprintf(stderr, "dlock_fuzz: --roles is required (non-superuser roles for the clients)\n");
		exit(2);
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	printed = load_shared(sizeof(int), false);
	signal(SIGPIPE, SIG_IGN);
	if (verify_file)
		return verify_snapshot(verify_file);
	if (herd > 0)
	{
		if (strcmp(herd_mode, "chain") && strcmp(herd_mode, "timeout") && strcmp(herd_mode, "storm"))
			usage();
		return herd_main();
	}
	return fuzz_main();
}
