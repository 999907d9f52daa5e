/*
 * crashload.c
 *		Load client and checker for dlock's crash tests (test/tap/020_crash.pl).
 *
 * crashload run -d CONNINFO -o LOGDIR [-c CLIENTS] [-t SECONDS] [-n NAMES]
 *               [-p PREFIX] [-s SEED] [-T TTL_SECONDS]
 *
 *	Forks CLIENTS clients (default 8).  Client N uses owner "cN" on its own
 *	connection and, for a loop of at most SECONDS, calls dlock_try,
 *	dlock_acquire (short timeout), dlock_renew and dlock_release on the names
 *	PREFIX0 .. PREFIX(NAMES-1), all in autocommit, with a ttl of TTL seconds
 *	(default 600: nothing expires during a test).  Now and then it also runs, on a
 *	second connection with owner "cNtx", "BEGIN; SELECT dlock_try(...)" and
 *	leaves that transaction open (the next such step rolls it back first), so
 *	that some tokens are returned by transactions that never commit.
 *
 *	Every answer of the server is appended at once (one write(2) per line,
 *	no buffering in the client) to LOGDIR/client-N.log with a sequence
 *	number and the wall-clock times (microseconds since the epoch) when the
 *	call was sent and when its answer arrived, so that after the server is
 *	killed the log says exactly what each client was told, and when:
 *
 *		seq sent done EVENT ..., EVENT one of:
 *		seq GRANT name token try|acquire	autocommit grant (or re-grant)
 *		seq BUSY name try|acquire			NULL: held by another owner
 *		seq RENEW name expires_epoch		autocommit renewal
 *		seq NORENEW name					renew returned NULL
 *		seq RELEASE name token|- ok|fail	token: the token argument, - = NULL
 *		seq BEGIN | ROLLBACK				on the transaction connection
 *		seq UNCOMMITTED name token			token seen inside an open transaction
 *		seq TXBUSY name						NULL inside the open transaction
 *		seq ERROR op name sqlstate message	the call failed, connection alive
 *		seq LOST op name					the connection died during this call:
 *											its outcome is unknown
 *		seq END reason						the client stopped (always last)
 *
 *	When a connection dies (server stopped or crashed), the client logs LOST
 *	and END and exits with status 0.
 *
 * crashload check -d CONNINFO -o LOGDIR [-m | -f | -u]
 *
 *	After the restart: reads the logs (and LOGDIR/meta written by run) and
 *	the server's dlock_locks/dlock_leases, and verifies
 *	  (a) every lease whose last acknowledged event was an autocommit GRANT
 *		  or RENEW, not released afterwards, is in dlock_locks with the same
 *		  owner and token (and, after a RENEW, an expiry no earlier than the
 *		  one acknowledged and no later than its ttl from now); acknowledged
 *		  releases stay released; no lease taken in a transaction that never
 *		  committed is revived;
 *	  (b) no name has two owners: not in the clients' view (no two clients'
 *		  claims on it overlap: see Claim), not in dlock_locks, and
 *		  dlock_leases agrees with dlock_locks;
 *	  (c) a grant on a fresh name (once a crash grace ended) returns a token
 *		  above every token any client ever saw (UNCOMMITTED ones included);
 *	plus what the logs alone can show: no token was handed out twice, and
 *	while the server was up every answer agreed with the client's leases
 *	(a holder's re-grant has the same token, renew/release of a held lease
 *	succeed, of an unheld one fail; a call sent after a lease's ttl may have
 *	ended it may find it ended).
 *	With -m (memory-only mode, dlock.durable = off) the leases must all be
 *	gone instead of present; (b) and (c) still apply.
 *	With -f (after a failover to an asynchronous standby) leases may be
 *	missing or older than the clients' last view, but every lease present
 *	must be one its owner was granted, with that token; (b) and (c) apply.
 *	With -u (after a crash, grants whose commits skipped the WAL flush: a
 *	ttl within dlock.failover_grace) the same as -f.
 *
 * crashload grace -d CONNINFO -o LOGDIR [-G GRACE_END | -G none]
 *
 *	While the crash grace runs: every lease a client held at the crash that
 *	is not in dlock_locks must end (its claim) before the grace's end (-G:
 *	as the server log says; default dlock_grace()), and a new owner's
 *	dlock_acquire of each name, which waits for the grace, must be answered
 *	after every client's claim on it ended.  -G none: no grace is expected
 *	(each name is tried once), to show the check catching two holders.
 *
 * crashload self-test
 *
 *	Doctored logs, each with the violations the checks must report.
 *	Prints the counts and every violation; exit status 0 only without any.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "loadlib.h"

#define Min(a, b)		((a) < (b) ? (a) : (b))
#define MAX_CLIENTS		64
#define MAX_NAMES		1024
#define LINE_MAX_LEN	1024

typedef struct Options
{
	LoadOptions load;			/* -d, -c, -t, -n (-s: seed below) */
	const char *dir;
	const char *prefix;
	unsigned int seed;
	int			ttl_s;			/* -T: the clients' ttl, in seconds */
	char		ttl[32];		/* the same as an interval */
	bool		memory;
	bool		failover;
	bool		unflushed;		/* -u */
	const char *grace_end;		/* -G */
} Options;

static void
die(const char *fmt,...)
{
	va_list		ap;

	fprintf(stderr, "crashload: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(2);
}

/* ===================================================================
 * run: the load clients
 * =================================================================== */

static int	log_fd = -1;
static long log_seq = 0;

/*
 * The wall clock (the server's: the same host) when the current call was
 * sent and when its answer arrived, in microseconds since the epoch; each
 * line carries them.
 */
static int64_t call_sent_us;
static int64_t call_done_us;

static int64_t
wall_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t) ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* For lines that answer no call (START, END): both times are now. */
static void
mark_now(void)
{
	call_sent_us = call_done_us = wall_us();
}

/*
 * Appends one line "seq sent_us done_us ..." to the client's log with a
 * single write(2).
 */
static void
logline(const char *fmt,...)
{
	char		buf[LINE_MAX_LEN];
	int			n;
	int			off = 0;
	va_list		ap;

	n = snprintf(buf, sizeof(buf), "%ld %lld %lld ", ++log_seq,
				 (long long) call_sent_us, (long long) call_done_us);
	va_start(ap, fmt);
	n += vsnprintf(buf + n, sizeof(buf) - n - 1, fmt, ap);
	va_end(ap);
	if (n > (int) sizeof(buf) - 2)
		n = sizeof(buf) - 2;
	/* one line per event: no newlines inside */
	for (int i = 0; i < n; i++)
		if (buf[i] == '\n' || buf[i] == '\r')
			buf[i] = ' ';
	buf[n++] = '\n';
	while (off < n)
	{
		ssize_t		w = write(log_fd, buf + off, n - off);

		if (w < 0)
		{
			if (errno == EINTR)
				continue;
			die("could not write the client log: %s", strerror(errno));
		}
		off += w;
	}
}

static uint64_t rng_state;

/* xorshift64* (not splitmix64: a seed repeats the choices of earlier runs) */
static uint32_t
rnd(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return (uint32_t) ((rng_state * UINT64_C(2685821657736338717)) >> 32);
}

static char last_message[512];

/*
 * Runs prepared statement stmt on conn and returns its result if it
 * succeeded.  Otherwise logs the failure of op on name (as the log names
 * them; name "-" for none) and returns NULL: "LOST op name" when the
 * connection is gone (then *alive is false), else "ERROR op name sqlstate
 * message" (the connection is alive).
 */
static PGresult *
call(PGconn *conn, const char *stmt, int nparams, const char *const *values,
	 const char *op, const char *name, bool *alive)
{
	PGresult   *res;
	char		sqlstate[8];

	call_sent_us = wall_us();
	res = PQexecPrepared(conn, stmt, nparams, values, NULL, NULL, 0);
	call_done_us = wall_us();

	*alive = true;
	if (load_ok(res))			/* (PQresultStatus(NULL) is an error) */
		return res;
	snprintf(sqlstate, sizeof(sqlstate), "%s", load_sqlstate(res, "-----"));
	snprintf(last_message, sizeof(last_message), "%s",
			 res ? PQresultErrorMessage(res) : PQerrorMessage(conn));
	/* 57P01/57P02/57P03: shutdown or crash; class 08: connection failure */
	*alive = !(PQstatus(conn) == CONNECTION_BAD || load_sqlstate(res, NULL) == NULL ||
			   strncmp(sqlstate, "57P", 3) == 0 || strncmp(sqlstate, "08", 2) == 0);
	if (res)
		PQclear(res);
	if (*alive)
		logline("ERROR %s %s %s %s", op, name, sqlstate, last_message);
	else
		logline("LOST %s %s", op, name);
	return NULL;
}

/* Notices (e.g. "terminating connection due to immediate shutdown") are noise. */
static void
ignore_notice(void *arg, const char *message)
{
	(void) arg;
	(void) message;
}

static PGconn *
connect_db(const char *conninfo, const char *appname)
{
	PGconn	   *conn = load_connect(conninfo, NULL, NULL, appname);

	if (PQstatus(conn) != CONNECTION_OK)
	{
		snprintf(last_message, sizeof(last_message), "%s", PQerrorMessage(conn));
		PQfinish(conn);
		return NULL;
	}
	PQsetNoticeProcessor(conn, ignore_notice, NULL);
	return conn;
}

static bool
prepare_all(PGconn *conn, bool txconn)
{
	static const char *const stmts[][2] = {
		{"try", "SELECT dlock_try($1, $2::interval, $3)"},
		{"acquire", "SELECT dlock_acquire($1, $2::interval, $3::interval, $4)"},
		{"renew", "SELECT extract(epoch FROM dlock_renew($1, $2::interval, $3))"},
		{"release", "SELECT dlock_release($1, $2, $3::bigint)"},
		{"begin", "BEGIN"},
		{"rollback", "ROLLBACK"},
	};

	for (size_t i = 0; i < sizeof(stmts) / sizeof(stmts[0]); i++)
	{
		PGresult   *res;

		if (txconn != (i >= 4) && i != 0)
			continue;
		res = PQprepare(conn, stmts[i][0], stmts[i][1], 0, NULL);
		if (PQresultStatus(res) != PGRES_COMMAND_OK)
		{
			snprintf(last_message, sizeof(last_message), "%s", PQresultErrorMessage(res));
			PQclear(res);
			return false;
		}
		PQclear(res);
	}
	return true;
}

typedef struct Client
{
	int			id;
	const Options *o;
	char		owner[32];
	char		txowner[32];
	PGconn	   *conn;
	PGconn	   *txconn;
	bool		txopen;
	long long  *held;			/* token per name index; 0 = not held */
} Client;

static void
name_of(const Client *c, int idx, char *buf, size_t len)
{
	snprintf(buf, len, "%s%d", c->o->prefix, idx);
}

/* Picks a held name with probability pct (if any is held), else any name. */
static int
pick_name(const Client *c, int pct)
{
	int			nheld = 0;

	for (int i = 0; i < c->o->load.names; i++)
		nheld += c->held[i] != 0;
	if (nheld > 0 && (int) (rnd() % 100) < pct)
	{
		int			k = rnd() % nheld;

		for (int i = 0; i < c->o->load.names; i++)
			if (c->held[i] != 0 && k-- == 0)
				return i;
	}
	return rnd() % c->o->load.names;
}

/* Returns false when the connection died (the client must stop). */
static bool
do_grant(Client *c, bool acquire)
{
	int			idx = rnd() % c->o->load.names;
	char		name[64];
	const char *op = acquire ? "acquire" : "try";
	const char *vals[4];
	PGresult   *res;
	bool		alive;

	name_of(c, idx, name, sizeof(name));
	vals[0] = name;
	vals[1] = c->o->ttl;
	if (acquire)
	{
		vals[2] = "30 milliseconds";
		vals[3] = c->owner;
	}
	else
		vals[2] = c->owner;
	res = call(c->conn, op, acquire ? 4 : 3, vals, op, name, &alive);
	if (res == NULL)
		return alive;
	if (PQgetisnull(res, 0, 0))
		logline("BUSY %s %s", name, op);
	else
	{
		long long	token = load_int64(res, 0, 0);

		logline("GRANT %s %lld %s", name, token, op);
		c->held[idx] = token;
	}
	PQclear(res);
	return true;
}

static bool
do_renew(Client *c)
{
	int			idx = pick_name(c, 90);
	char		name[64];
	const char *vals[3];
	PGresult   *res;
	bool		alive;

	name_of(c, idx, name, sizeof(name));
	vals[0] = name;
	vals[1] = c->o->ttl;
	vals[2] = c->owner;
	res = call(c->conn, "renew", 3, vals, "renew", name, &alive);
	if (res == NULL)
		return alive;
	if (PQgetisnull(res, 0, 0))
		logline("NORENEW %s", name);
	else
		logline("RENEW %s %s", name, PQgetvalue(res, 0, 0));
	PQclear(res);
	return true;
}

static bool
do_release(Client *c)
{
	int			idx = pick_name(c, 90);
	char		name[64];
	char		tokbuf[32];
	const char *vals[3];
	unsigned int how = rnd() % 100;
	PGresult   *res;
	bool		alive;

	name_of(c, idx, name, sizeof(name));
	vals[0] = name;
	vals[1] = c->owner;
	vals[2] = NULL;
	if (how < 40 && c->held[idx] != 0)
	{
		vals[2] = load_i64(tokbuf, c->held[idx]);
	}
	else if (how < 45 && c->held[idx] != 0)
	{
		/* a stale token: must not release the lease */
		vals[2] = load_i64(tokbuf, c->held[idx] - 1);
	}
	res = call(c->conn, "release", 3, vals, "release", name, &alive);
	if (res == NULL)
		return alive;
	if (strcmp(PQgetvalue(res, 0, 0), "t") == 0)
	{
		logline("RELEASE %s %s ok", name, vals[2] ? vals[2] : "-");
		c->held[idx] = 0;
	}
	else
		logline("RELEASE %s %s fail", name, vals[2] ? vals[2] : "-");
	PQclear(res);
	return true;
}

/*
 * Rolls back the open transaction, if any, and leaves a new one open after
 * one to three dlock_try calls on distinct names.
 */
static bool
do_txn(Client *c)
{
	PGresult   *res;
	bool		alive;
	int			k = 1 + rnd() % 3;
	int			used[3];

	if (c->txconn == NULL)
	{
		char		app[64];

		snprintf(app, sizeof(app), "crashload-%s", c->txowner);
		c->txconn = connect_db(c->o->load.conninfo, app);
		if (c->txconn == NULL)
		{
			/* the server is probably going down: stop like the others */
			mark_now();
			logline("LOST connect txn %s", last_message);
			return false;
		}
		if (!prepare_all(c->txconn, true))
		{
			mark_now();
			logline("LOST prepare txn %s", last_message);
			return false;
		}
	}
	if (c->txopen)
	{
		res = call(c->txconn, "rollback", 0, NULL, "rollback", "-", &alive);
		if (res == NULL)
			return alive;
		PQclear(res);
		logline("ROLLBACK");
		c->txopen = false;
	}
	res = call(c->txconn, "begin", 0, NULL, "begin", "-", &alive);
	if (res == NULL)
		return alive;
	PQclear(res);
	logline("BEGIN");
	c->txopen = true;

	for (int i = 0; i < k; i++)
	{
		int			idx;
		bool		dup;
		char		name[64];
		const char *vals[3];

		do
		{
			idx = rnd() % c->o->load.names;
			dup = false;
			for (int j = 0; j < i; j++)
				dup |= used[j] == idx;
		} while (dup && c->o->load.names > 3);
		used[i] = idx;
		name_of(c, idx, name, sizeof(name));
		vals[0] = name;
		vals[1] = c->o->ttl;
		vals[2] = c->txowner;
		/* after an ERROR the transaction is aborted; the next step rolls it back */
		res = call(c->txconn, "try", 3, vals, "txtry", name, &alive);
		if (res == NULL)
			return alive;
		if (PQgetisnull(res, 0, 0))
			logline("TXBUSY %s", name);
		else
			logline("UNCOMMITTED %s %s", name, PQgetvalue(res, 0, 0));
		PQclear(res);
	}
	return true;
}

static int
client_main(int id, const Options *o)
{
	Client		c;
	char		path[4096];
	char		app[64];
	int64_t		deadline = load_now_us() + (int64_t) o->load.seconds * 1000000;
	const char *reason = "time";

	memset(&c, 0, sizeof(c));
	c.id = id;
	c.o = o;
	snprintf(c.owner, sizeof(c.owner), "c%d", id);
	snprintf(c.txowner, sizeof(c.txowner), "c%dtx", id);
	c.held = calloc(o->load.names, sizeof(long long));
	rng_state = ((uint64_t) o->seed << 20) ^ (uint64_t) (id + 1) * UINT64_C(0x9E3779B97F4A7C15);
	if (rng_state == 0)
		rng_state = 1;

	snprintf(path, sizeof(path), "%s/client-%d.log", o->dir, id);
	log_fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
	if (log_fd < 0)
		die("could not open \"%s\": %s", path, strerror(errno));

	snprintf(app, sizeof(app), "crashload-%s", c.owner);
	c.conn = connect_db(o->load.conninfo, app);
	if (c.conn == NULL)
	{
		mark_now();
		logline("END connect-failed %s", last_message);
		return 1;
	}
	if (!prepare_all(c.conn, false))
	{
		mark_now();
		logline("END prepare-failed %s", last_message);
		return 1;
	}
	mark_now();
	logline("START %s %s", c.owner, c.txowner);

	while (load_now_us() < deadline)
	{
		unsigned int u = rnd() % 100;
		bool		alive;

		if (u < 3)
			alive = do_txn(&c);
		else if (u < 35)
			alive = do_grant(&c, false);
		else if (u < 50)
			alive = do_grant(&c, true);
		else if (u < 70)
			alive = do_renew(&c);
		else
			alive = do_release(&c);
		if (!alive)
		{
			reason = "connection-lost";
			break;
		}
	}
	mark_now();
	logline("END %s", reason);
	/* PQfinish closes the open transaction: rolled back, never committed */
	if (c.txconn)
		PQfinish(c.txconn);
	PQfinish(c.conn);
	close(log_fd);
	return 0;
}

static int
run_main(const Options *o)
{
	pid_t		pids[MAX_CLIENTS];
	int			status[MAX_CLIENTS];
	char		path[4096];
	FILE	   *meta;
	int			failed = 0;

	if (mkdir(o->dir, 0755) != 0 && errno != EEXIST)
		die("could not create \"%s\": %s", o->dir, strerror(errno));
	snprintf(path, sizeof(path), "%s/meta", o->dir);
	meta = fopen(path, "w");
	if (meta == NULL)
		die("could not write \"%s\": %s", path, strerror(errno));
	fprintf(meta, "clients %d\nnames %d\nprefix %s\nttl %d\n",
			o->load.clients, o->load.names, o->prefix, o->ttl_s);
	fclose(meta);

	fflush(stdout);
	for (int i = 0; i < o->load.clients; i++)
	{
		pids[i] = fork();
		if (pids[i] < 0)
			die("fork failed: %s", strerror(errno));
		if (pids[i] == 0)
			_exit(client_main(i + 1, o));
	}
	load_reap(o->load.clients, pids, status, INT64_MAX, NULL);
	for (int i = 0; i < o->load.clients; i++)
		if (!WIFEXITED(status[i]) || WEXITSTATUS(status[i]) != 0)
			failed++;
	printf("crashload: %d clients done, %d failed to start\n", o->load.clients, failed);
	return failed ? 1 : 0;
}

/* ===================================================================
 * check: the logs against the restarted server
 * =================================================================== */

/*
 * What one client was told of one name.  A lease the client holds runs, as
 * far as it knows, at least until until_min (the call that granted or
 * extended it was sent then minus its ttl, or a renewal returned that
 * expiry) and at most until until_max (the answer arrived then minus the
 * ttl): a call sent in between may find it ended or not.
 */
typedef struct Belief
{
	long long	token;			/* held lease, 0 = none */
	int64_t		held_since;		/* when the answer of its grant arrived */
	int64_t		until_min;
	int64_t		until_max;
	int64_t		release_sent;	/* when the release in flight at the crash
								 * was sent */
	bool		renewed_last;	/* last acknowledged event: RENEW */
	double		renew_expires;
	bool		lost_release;	/* the in-flight call at the crash: release */
	bool		lost_grant;		/* ... try or acquire while not held */
	bool		lost_renew;
	bool		lost_regrant;	/* ... try or acquire of a held lease */
	bool		matched;
	long long	released;		/* token of an acknowledged release after
								 * which this client acknowledged no grant or
								 * renewal: its commit was not waited for, so
								 * a crash may bring the lease back */
} Belief;

/*
 * The client's grant or renewal was acknowledged: its commit flushed all WAL
 * before it, the client's earlier releases with it.
 */
static void
forget_releases(Belief *client_beliefs)
{
	for (int n = 0; n < MAX_NAMES; n++)
		client_beliefs[n].released = 0;
}

typedef struct TokenSeen
{
	long long	token;
	int			epoch;			/* one per grant (re-grants share it) */
	int			client;
	int			name;
	char		kind;			/* 'G' grant, 'U' uncommitted */
} TokenSeen;

/*
 * A lease a client was told it held, from the answer of its grant to the
 * earliest moment it may have ended: the release's sending, or its expiry
 * as far as the client knows (until_min), crash or no crash.  Two clients'
 * claims on one name must not overlap, nor may a grant after the crash
 * fall inside one: that is two holders.  A lease lost in the crash ended
 * for the server, but not for its holder, who still acts on it until then.
 */
typedef struct Claim
{
	int			client;
	int			name;
	long long	token;
	int64_t		start;
	int64_t		end;
	bool		at_crash;		/* still held when the client stopped: ends
								 * by its ttl, or its release in flight */
	bool		restored;		/* (grace) in dlock_locks after the restart */
} Claim;

static Belief beliefs[MAX_CLIENTS + 1][MAX_NAMES];
static TokenSeen *seen;
static int	nseen;
static int	maxseen;
static int	nviolations;
static Claim *claims;
static int	nclaims;
static int	maxclaims;
static long nexpired;			/* leases the client saw end by their ttl */
static int	meta_clients;
static int	meta_names;
static char meta_prefix[128];
static int64_t meta_ttl_us;

static void
violation(const char *fmt,...)
{
	va_list		ap;

	nviolations++;
	if (nviolations > 50)
		return;
	printf("VIOLATION: ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	putchar('\n');
}

static void
add_seen(long long token, int epoch, int client, int name, char kind)
{
	if (nseen == maxseen)
	{
		maxseen = maxseen ? maxseen * 2 : 1024;
		seen = realloc(seen, sizeof(TokenSeen) * maxseen);
		if (seen == NULL)
			die("out of memory");
	}
	seen[nseen].token = token;
	seen[nseen].epoch = epoch;
	seen[nseen].client = client;
	seen[nseen].name = name;
	seen[nseen].kind = kind;
	nseen++;
}

static void
add_claim(int client, int name, const Belief *b, int64_t end, bool at_crash)
{
	if (nclaims == maxclaims)
	{
		maxclaims = maxclaims ? maxclaims * 2 : 1024;
		claims = realloc(claims, sizeof(Claim) * maxclaims);
		if (claims == NULL)
			die("out of memory");
	}
	claims[nclaims] = (Claim) {client, name, b->token, b->held_since, end, at_crash, false};
	nclaims++;
}

/* The client's lease ended (released at end, or expired): its claim is whole. */
static void
end_hold(int client, int name, Belief *b, int64_t end)
{
	add_claim(client, name, b, end, false);
	b->token = 0;
	b->renewed_last = false;
}

/* A call sent at t finds a lease whose latest possible expiry has passed ended. */
static void
expire_before(int client, int name, Belief *b, int64_t t)
{
	if (b->token != 0 && t >= b->until_max)
	{
		nexpired++;
		end_hold(client, name, b, b->until_min);
	}
}

/* Whether the lease may have expired before a call sent at t. */
static bool
may_have_expired(const Belief *b, int64_t t)
{
	return b->token != 0 && t >= b->until_min;
}

/* Two clients' claims on one name overlap: two holders at once. */
static void
check_claims(void)
{
	for (int i = 0; i < nclaims; i++)
		for (int j = i + 1; j < nclaims; j++)
		{
			const Claim *x = &claims[i];
			const Claim *y = &claims[j];

			if (x->name != y->name || x->client == y->client ||
				x->start >= y->end || y->start >= x->end)
				continue;
			violation("two holders of %s%d: client %d (token %lld) from %.6f until at least %.6f,"
					  " client %d (token %lld) from %.6f until at least %.6f",
					  meta_prefix, x->name, x->client, x->token, x->start / 1e6, x->end / 1e6,
					  y->client, y->token, y->start / 1e6, y->end / 1e6);
		}
}

/*
 * A grant of name, after the restart, to another owner, whose answer
 * arrived at ack: no client's claim on that name may still run.
 */
static void
check_after_grant(int name, long long token, int64_t ack)
{
	for (int i = 0; i < nclaims; i++)
	{
		const Claim *x = &claims[i];

		if (x->name == name && x->end > ack)
			violation("two holders of %s%d: granted after the restart (token %lld, answer at %.6f),"
					  " %.3f s before the end of client %d's %slease (token %lld, held from %.6f until at least %.6f)",
					  meta_prefix, name, token, ack / 1e6, (x->end - ack) / 1e6, x->client,
					  x->restored ? "restored " : x->at_crash ? "lost " : "", x->token,
					  x->start / 1e6, x->end / 1e6);
	}
}

static int
cmp_seen(const void *a, const void *b)
{
	const TokenSeen *x = a;
	const TokenSeen *y = b;

	if (x->token != y->token)
		return x->token < y->token ? -1 : 1;
	return x->epoch - y->epoch;
}

static const char *
fmt_token(long long t, char *buf, size_t len)
{
	snprintf(buf, len, "%lld (timeline %lld, counter %lld)",
			 t, t >> 48, t & ((1LL << 48) - 1));
	return buf;
}

typedef struct Counts
{
	long		events;
	long		grants;
	long		busy;
	long		uncommitted;
	long		renews;
	long		norenews;
	long		releases_ok;
	long		releases_fail;
	long		lost;
	long		errors;
	long		rollbacks;
} Counts;


static void
read_meta(const char *dir)
{
	char		path[4096];
	FILE	   *f;
	int			ttl_s;

	snprintf(path, sizeof(path), "%s/meta", dir);
	f = fopen(path, "r");
	if (f == NULL)
		die("could not read \"%s\": %s", path, strerror(errno));
	if (fscanf(f, "clients %d\nnames %d\nprefix %127s\nttl %d", &meta_clients, &meta_names,
			   meta_prefix, &ttl_s) != 4)
		die("bad meta file \"%s\"", path);
	fclose(f);
	if (meta_clients < 1 || meta_clients > MAX_CLIENTS || meta_names < 1 || meta_names > MAX_NAMES ||
		ttl_s < 1)
		die("bad meta file \"%s\"", path);
	meta_ttl_us = (int64_t) ttl_s * 1000000;
}

static int
name_index(const char *name)
{
	size_t		plen = strlen(meta_prefix);
	char	   *end;
	long		idx;

	if (strncmp(name, meta_prefix, plen) != 0)
		return -1;
	idx = strtol(name + plen, &end, 10);
	if (*end != '\0' || end == name + plen || idx < 0 || idx >= meta_names)
		return -1;
	return (int) idx;
}

/* Reads one client's log, checking it against itself as it goes. */
static void
read_client_log(const char *dir, int client, Counts *cnt, int *epoch)
{
	char		path[4096];
	char		line[LINE_MAX_LEN + 2];
	FILE	   *f;
	long		expect_seq = 1;
	bool		ended = false;
	int			tx_names[16];
	int			ntx = 0;
	long long	sent = 0,
				done = 0;

	snprintf(path, sizeof(path), "%s/client-%d.log", dir, client);
	f = fopen(path, "r");
	if (f == NULL)
	{
		violation("client %d: no log \"%s\"", client, path);
		return;
	}
	while (fgets(line, sizeof(line), f) != NULL)
	{
		long		seq;
		char		ev[32] = "",
					a1[256] = "",
					a2[256] = "",
					a3[256] = "";
		int			idx;
		Belief	   *b;

		line[strcspn(line, "\n")] = '\0';
		if (sscanf(line, "%ld %lld %lld %31s %255s %255s %255s", &seq, &sent, &done,
				   ev, a1, a2, a3) < 4)
		{
			violation("client %d: unreadable log line \"%s\"", client, line);
			continue;
		}
		if (ended)
			violation("client %d: line after END: \"%s\"", client, line);
		if (seq != expect_seq)
			violation("client %d: sequence number %ld, expected %ld", client, seq, expect_seq);
		expect_seq = seq + 1;
		cnt->events++;

		if (strcmp(ev, "END") == 0)
		{
			ended = true;
			if (strcmp(a1, "time") != 0 && strcmp(a1, "connection-lost") != 0)
				violation("client %d: ended with \"%s\"", client, line);
			/* what it still held then: claims that run on through the crash */
			for (int n = 0; n < meta_names; n++)
			{
				b = &beliefs[client][n];
				expire_before(client, n, b, sent);
				if (b->token != 0)
					add_claim(client, n, b,
							  b->lost_release ? Min(b->release_sent, b->until_min) : b->until_min,
							  true);
			}
			continue;
		}
		if (strcmp(ev, "START") == 0)
			continue;
		if (strcmp(ev, "BEGIN") == 0)
		{
			ntx = 0;
			continue;
		}
		if (strcmp(ev, "ROLLBACK") == 0)
		{
			cnt->rollbacks++;
			continue;
		}
		if (strcmp(ev, "ERROR") == 0)
		{
			cnt->errors++;
			violation("client %d: call failed: %s", client, line);
			continue;
		}
		if (strcmp(ev, "LOST") == 0)
		{
			cnt->lost++;
			idx = name_index(a2);
			if (idx < 0)
				continue;		/* transaction steps: uncommitted anyway */
			b = &beliefs[client][idx];
			expire_before(client, idx, b, sent);
			if (strcmp(a1, "release") == 0 && b->token != 0)
			{
				b->lost_release = true;
				b->release_sent = sent;
			}
			else if ((strcmp(a1, "try") == 0 || strcmp(a1, "acquire") == 0) && b->token == 0)
				b->lost_grant = true;
			else if (strcmp(a1, "try") == 0 || strcmp(a1, "acquire") == 0)
				b->lost_regrant = true;	/* may have extended the lease */
			else if (strcmp(a1, "renew") == 0 && b->token != 0)
				b->lost_renew = true;
			continue;
		}

		idx = name_index(a1);
		if (idx < 0)
		{
			violation("client %d: unknown name in \"%s\"", client, line);
			continue;
		}
		b = &beliefs[client][idx];
		/*
		 * A lease the call finds ended by its ttl for certain is no longer
		 * held; one that may have ended can answer either way, and its
		 * answer says which.
		 */
		expire_before(client, idx, b, sent);

		if (strcmp(ev, "GRANT") == 0)
		{
			long long	token = strtoll(a2, NULL, 10);

			cnt->grants++;
			if (token <= 0)
				violation("client %d: bad token in \"%s\"", client, line);
			if (b->token != 0 && b->token != token)
			{
				if (may_have_expired(b, sent))
				{
					nexpired++;
					end_hold(client, idx, b, b->until_min);
				}
				else
					violation("client %d: re-grant of %s held with token %lld returned %lld (line %ld)",
							  client, a1, b->token, token, seq);
			}
			if (b->token == 0)
			{
				add_seen(token, ++(*epoch), client, idx, 'G');
				b->held_since = done;
			}
			b->token = token;
			/* a grant, or a re-grant, runs for its ttl from the call */
			b->until_min = sent + meta_ttl_us;
			b->until_max = done + meta_ttl_us;
			b->renewed_last = false;
			forget_releases(beliefs[client]);
		}
		else if (strcmp(ev, "BUSY") == 0)
		{
			cnt->busy++;
			if (may_have_expired(b, sent))
			{
				nexpired++;
				end_hold(client, idx, b, b->until_min);
			}
			else if (b->token != 0)
				violation("client %d: %s of %s, which it holds (token %lld), returned NULL (line %ld)",
						  client, a2, a1, b->token, seq);
		}
		else if (strcmp(ev, "RENEW") == 0)
		{
			cnt->renews++;
			if (b->token == 0)
				violation("client %d: renewed %s, which it does not hold (line %ld)", client, a1, seq);
			b->renewed_last = true;
			b->renew_expires = strtod(a2, NULL);
			/* the server's own expiry, to the microsecond */
			b->until_min = b->until_max = (int64_t) (b->renew_expires * 1e6 + 0.5);
			forget_releases(beliefs[client]);
		}
		else if (strcmp(ev, "NORENEW") == 0)
		{
			cnt->norenews++;
			if (may_have_expired(b, sent))
			{
				nexpired++;
				end_hold(client, idx, b, b->until_min);
			}
			else if (b->token != 0)
				violation("client %d: renew of %s, held with token %lld, returned NULL (line %ld)",
						  client, a1, b->token, seq);
		}
		else if (strcmp(ev, "RELEASE") == 0)
		{
			bool		ok = strcmp(a3, "ok") == 0;
			bool		should = b->token != 0 &&
				(strcmp(a2, "-") == 0 || strtoll(a2, NULL, 10) == b->token);

			if (ok)
				cnt->releases_ok++;
			else
				cnt->releases_fail++;
			if (should && !ok && may_have_expired(b, sent))
			{
				nexpired++;
				end_hold(client, idx, b, b->until_min);
			}
			else if (ok != should)
				violation("client %d: release of %s with token %s (held: %lld) returned %s (line %ld)",
						  client, a1, a2, b->token, a3, seq);
			if (ok && b->token != 0)
			{
				b->released = b->token;
				end_hold(client, idx, b, Min(sent, b->until_min));
			}
		}
		else if (strcmp(ev, "UNCOMMITTED") == 0)
		{
			long long	token = strtoll(a2, NULL, 10);
			bool		again = false;

			cnt->uncommitted++;
			for (int i = 0; i < ntx; i++)
				again |= tx_names[i] == idx;
			if (!again)
			{
				add_seen(token, ++(*epoch), client, idx, 'U');
				if (ntx < 16)
					tx_names[ntx++] = idx;
			}
		}
		else if (strcmp(ev, "TXBUSY") == 0)
			cnt->busy++;
		else
			violation("client %d: unknown event in \"%s\"", client, line);
	}
	fclose(f);
	if (!ended)
		violation("client %d: its log has no END line (did the client die?)", client);
}

/* "cN" -> N, "cNtx" -> -N; 0 for anything else */
static int
parse_owner(const char *owner)
{
	char	   *end;
	long		n;

	if (owner[0] != 'c')
		return 0;
	n = strtol(owner + 1, &end, 10);
	if (end == owner + 1 || n < 1 || n > meta_clients)
		return 0;
	if (*end == '\0')
		return (int) n;
	if (strcmp(end, "tx") == 0)
		return (int) -n;
	return 0;
}

/*
 * Reads LOGDIR's meta and every client's log (the beliefs, the tokens seen,
 * the claims), checks what the logs alone can show, and returns the largest
 * token any client saw.
 */
static long long
read_logs(const char *dir, Counts *cnt)
{
	int			epoch = 0;
	long long	max_token = 0;

	read_meta(dir);
	for (int c = 1; c <= meta_clients; c++)
		read_client_log(dir, c, cnt, &epoch);

	/* tokens: each handed out once; the largest any client saw */
	qsort(seen, nseen, sizeof(TokenSeen), cmp_seen);
	for (int i = 0; i < nseen; i++)
	{
		if (i > 0 && seen[i].token == seen[i - 1].token)
			violation("token %lld handed out twice: client %d %s%d (%s) and client %d %s%d (%s)",
					  seen[i].token,
					  seen[i - 1].client, meta_prefix, seen[i - 1].name,
					  seen[i - 1].kind == 'G' ? "grant" : "uncommitted",
					  seen[i].client, meta_prefix, seen[i].name,
					  seen[i].kind == 'G' ? "grant" : "uncommitted");
		if (seen[i].token > max_token)
			max_token = seen[i].token;
	}

	/*
	 * (b) in the clients' view: no two claims on a name overlap.  A holder
	 * whose release was in flight at the crash claims it until that release
	 * was sent: the release may have committed and handed the lease to a
	 * waiter, whose answer did arrive.
	 */
	check_claims();
	return max_token;
}

static int
check_main(const Options *o)
{
	Counts		cnt;
	long long	max_token;
	int			expected = 0;
	int			found = 0;
	int			matched = 0;
	int			held = 0;
	int			uncertain_release = 0;
	int			uncertain_grant = 0;
	int			expiries_checked = 0;
	int			lost_releases = 0;
	PGconn	   *conn;
	PGresult   *res;
	PGresult   *rows;
	const char *params[2];
	char		fresh[160];
	long long	first_new = 0;
	char		b1[96],
				b2[96];

	memset(&cnt, 0, sizeof(cnt));
	max_token = read_logs(o->dir, &cnt);
	for (int n = 0; n < meta_names; n++)
	{
		for (int c = 1; c <= meta_clients; c++)
		{
			if (beliefs[c][n].token != 0)
			{
				held++;
				if (beliefs[c][n].lost_release)
					uncertain_release++;
				else
					expected++;
			}
			else if (beliefs[c][n].lost_grant)
				uncertain_grant++;
		}
	}

	conn = PQconnectdb(o->load.conninfo);
	if (PQstatus(conn) != CONNECTION_OK)
		die("could not connect: %s", PQerrorMessage(conn));
	/* the checker's own grants must not lengthen the grace of a later crash */
	PQclear(load_must(conn, "SET dlock.flush_grants = on"));

	/* (a), (b): the live leases of the round's names */
	params[0] = meta_prefix;
	res = load_must_params(conn,
				"SELECT k.name, k.owner, k.token, extract(epoch FROM k.expires_at)::float8, k.durable,"
				" extract(epoch FROM l.ttl)::float8, extract(epoch FROM clock_timestamp())::float8"
				" FROM dlock_locks k LEFT JOIN dlock_leases l USING (name, token)"
				" WHERE starts_with(k.name, $1) ORDER BY k.name, k.owner",
				1, params);
	for (int i = 0; i < PQntuples(res); i++)
	{
		const char *name = PQgetvalue(res, i, 0);
		const char *owner = PQgetvalue(res, i, 1);
		long long	token = load_int64(res, i, 2);
		double		expires = strtod(PQgetvalue(res, i, 3), NULL);
		double		ttl = PQgetisnull(res, i, 5) ? -1 : strtod(PQgetvalue(res, i, 5), NULL);
		double		now = strtod(PQgetvalue(res, i, 6), NULL);
		int			n = name_index(name);
		int			c = parse_owner(owner);
		Belief	   *b;

		if (i > 0 && strcmp(name, PQgetvalue(res, i - 1, 0)) == 0)
			violation("%s is listed twice in dlock_locks: owners %s and %s",
					  name, PQgetvalue(res, i - 1, 1), owner);
		if (n < 0 || strcmp(owner, "crashload-after") == 0)
			continue;			/* not a client's name or lease (a checker's) */
		found++;
		if (o->memory)
		{
			violation("memory-only mode: lease %s (owner %s, token %lld) survived the restart",
					  name, owner, token);
			continue;
		}
		if (c < 0)
		{
			violation("%s: lease of %s (token %lld), taken in a transaction that never committed, was revived",
					  name, owner, token);
			continue;
		}
		if (c == 0)
		{
			violation("%s: lease of unknown owner %s (token %lld)", name, owner, token);
			continue;
		}
		b = &beliefs[c][n];
		if (o->failover || o->unflushed)
		{
			/*
			 * Asynchronous replication, or commits that did not wait for
			 * their flush: the lease must be one this client was granted on
			 * this name at some point (or a grant in flight), though perhaps
			 * not its last state.
			 */
			bool		granted = b->lost_grant;

			for (int k = 0; k < nseen && !granted; k++)
				granted = seen[k].token == token && seen[k].kind == 'G' &&
					seen[k].client == c && seen[k].name == n;
			if (!granted)
				violation("%s: lease of %s with token %lld, which no client was granted on this name",
						  name, owner, token);
			else
			{
				matched++;
				b->matched = b->token == token;
			}
			continue;
		}
		if (b->token != 0)
		{
			if (b->token != token)
				violation("%s: owner %s was told token %lld, dlock_locks has %lld",
						  name, owner, b->token, token);
			else
			{
				b->matched = true;
				matched++;
				/*
				 * After an acknowledged renewal (and no later extension that
				 * might have committed), the restart never cuts the lease
				 * short: it runs at least until the expiry acknowledged, and
				 * at most its ttl (the renewal's, in its row) from now, as
				 * the rebuild gives it its full ttl again.
				 */
				if (b->renewed_last && !b->lost_renew && !b->lost_regrant)
				{
					expiries_checked++;
					if (ttl < 0)
						violation("%s: renewed lease of %s (token %lld) has no row",
								  name, owner, token);
					else if (expires < b->renew_expires - 1.0 || expires > now + ttl + 1.0)
						violation("%s: renewed until %.6f (acknowledged), ttl %.0f s; dlock_locks has %.6f at %.6f",
								  name, b->renew_expires, ttl, expires, now);
				}
			}
		}
		else if (b->released == token)
			lost_releases++;	/* allowed: the lease comes back whole */
		else if (!b->lost_grant)
			violation("%s: lease of %s (token %lld) that the client had released or never held",
					  name, owner, token);
		else
		{
			/* a grant whose answer was lost in the crash committed */
			for (int k = 0; k < nseen; k++)
				if (seen[k].token == token)
					violation("%s: lease of %s with token %lld, a token already handed out",
							  name, owner, token);
		}
	}

	if (!o->memory && !o->failover && !o->unflushed)
	{
		for (int n = 0; n < meta_names; n++)
			for (int c = 1; c <= meta_clients; c++)
			{
				Belief	   *b = &beliefs[c][n];

				if (b->token != 0 && !b->matched && !b->lost_release)
					violation("%s%d: lease of c%d (token %lld, last acknowledged: %s) is missing after the restart",
							  meta_prefix, n, c, b->token, b->renewed_last ? "RENEW" : "GRANT");
			}
	}

	/*
	 * (b) the lease table agrees with dlock_locks.  Only the clients' names
	 * and leases: other checkers running at the same time take and release
	 * fresh names, and the clients' names (crashload grace), and a row's
	 * snapshot and the live shared memory may disagree on those.
	 */
	rows = load_must_params(conn,
				 "SELECT l.name, l.owner, l.token, k.owner, k.token"
				 " FROM dlock_leases l LEFT JOIN dlock_locks k USING (name)"
				 " WHERE starts_with(l.name, $1) AND l.expires_at > now()"
				 "   AND (k.name IS NULL OR k.owner <> l.owner OR k.token <> l.token)"
				 "   AND 'crashload-after' NOT IN (l.owner, coalesce(k.owner, ''))",
				 1, params);
	for (int i = 0; i < PQntuples(rows); i++)
		if (name_index(PQgetvalue(rows, i, 0)) >= 0)	/* not a checker's */
			violation("%s: dlock_leases has owner %s token %s, dlock_locks has owner %s token %s",
					  PQgetvalue(rows, i, 0), PQgetvalue(rows, i, 1), PQgetvalue(rows, i, 2),
					  PQgetisnull(rows, i, 3) ? "(none)" : PQgetvalue(rows, i, 3),
					  PQgetisnull(rows, i, 4) ? "(none)" : PQgetvalue(rows, i, 4));
	PQclear(rows);
	PQclear(res);

	/* (c) new tokens are above every token seen */
	for (int k = 0; k < 3; k++)
	{
		long long	t;

		snprintf(fresh, sizeof(fresh), "%sfresh-%d-%d-%ld", meta_prefix, (int) getpid(), k,
				 (long) time(NULL));
		params[0] = fresh;
		/* (after a crash with unflushed grants: once the crash grace ended) */
		res = load_must_params(conn, "SELECT dlock_acquire($1, '1 minute', '2 minutes', 'crashload-checker')",
							   1, params);
		if (PQgetisnull(res, 0, 0))
			die("dlock_acquire on the fresh name %s returned NULL", fresh);
		t = load_int64(res, 0, 0);
		PQclear(res);
		if (k == 0)
			first_new = t;
		if (t <= max_token)
			violation("new token %s is not above the largest token seen, %s",
					  fmt_token(t, b1, sizeof(b1)), fmt_token(max_token, b2, sizeof(b2)));
		params[1] = "crashload-checker";
		res = load_must_params(conn, "SELECT dlock_release($1, $2)", 2, params);
		PQclear(res);
	}
	PQfinish(conn);

	printf("checker: mode %s, clients %d, names %d (prefix %s)\n",
		   o->memory ? "memory-only" : o->failover ? "failover" :
		   o->unflushed ? "durable, unflushed grants" : "durable",
		   meta_clients, meta_names, meta_prefix);
	printf("checker: events %ld: grants %ld, busy %ld, uncommitted %ld, renews %ld (null %ld),"
		   " releases ok %ld fail %ld, rollbacks %ld, lost in the crash %ld, errors %ld\n",
		   cnt.events, cnt.grants, cnt.busy, cnt.uncommitted, cnt.renews, cnt.norenews,
		   cnt.releases_ok, cnt.releases_fail, cnt.rollbacks, cnt.lost, cnt.errors);
	printf("checker: held at the crash %d; uncertain: %d with a release in flight, %d with a grant in flight;"
		   " ended by their ttl before %ld\n",
		   held, uncertain_release, uncertain_grant, nexpired);
	printf("checker: leases expected %d, found %d, matched %d (renewed expiry checked on %d),"
		   " back after a release the crash lost %d\n",
		   o->memory || o->failover || o->unflushed ? 0 : expected, found, matched, expiries_checked,
		   lost_releases);
	if (o->unflushed)
	{
		int			lost = 0;

		for (int n = 0; n < meta_names; n++)
			for (int c = 1; c <= meta_clients; c++)
				lost += beliefs[c][n].token != 0 && !beliefs[c][n].lost_release &&
					!beliefs[c][n].matched;
		printf("checker: held at the crash and not back (unflushed, lost) %d\n", lost);
	}
	printf("checker: tokens seen %d, max token %s\n", nseen, fmt_token(max_token, b1, sizeof(b1)));
	printf("checker: first new token %s\n", fmt_token(first_new, b1, sizeof(b1)));
	printf("checker: violations %d\n", nviolations);
	printf("checker: %s\n", nviolations == 0 ? "OK" : "FAILED");
	return nviolations == 0 ? 0 : 1;
}

/*
 * Every lease a client held at the crash that is not back ends before the
 * grace that began at the restart; counts them.
 */
static void
check_grace_covers(int64_t grace_end, int *at_crash, int *restored)
{
	for (int k = 0; k < nclaims; k++)
	{
		const Claim *x = &claims[k];

		if (!x->at_crash)
			continue;
		(*at_crash)++;
		*restored += x->restored;
		if (!x->restored && x->end > grace_end)
			violation("the grace ends at %.6f, %.3f s before the end of client %d's lease of %s%d"
					  " (token %lld, held from %.6f until at least %.6f), not in dlock_locks after the restart",
					  grace_end / 1e6, (x->end - grace_end) / 1e6, x->client, meta_prefix, x->name,
					  x->token, x->start / 1e6, x->end / 1e6);
	}
}

/*
 * After a crash restart with unflushed grants, during the crash grace:
 * every lease a client held at the crash that did not come back must end
 * before the grace does, and a grant of each name to a new owner (which
 * waits for the grace) must fall in no client's claim on it.
 */
static int
grace_main(const Options *o)
{
	Counts		cnt;
	long long	max_token;
	int64_t		grace_end = 0;
	int			at_crash = 0;
	int			restored = 0;
	int64_t		first_ack = 0;
	int64_t		last_ack = 0;
	int			granted = 0;
	bool		none = o->grace_end && strcmp(o->grace_end, "none") == 0;
	PGconn	   *conn;
	PGresult   *res;
	const char *params[2];
	char		b1[96];

	memset(&cnt, 0, sizeof(cnt));
	max_token = read_logs(o->dir, &cnt);

	conn = PQconnectdb(o->load.conninfo);
	if (PQstatus(conn) != CONNECTION_OK)
		die("could not connect: %s", PQerrorMessage(conn));
	PQclear(load_must(conn, "SET dlock.flush_grants = on"));

	/*
	 * The grace's end: as the server log said (-G), or as dlock_grace() says;
	 * -G none: there is none (the self-test of a server without it).
	 */
	if (!none)
	{
		params[0] = o->grace_end;
		res = o->grace_end
			? load_must_params(conn, "SELECT (extract(epoch FROM $1::timestamptz) * 1e6)::int8", 1, params)
			: load_must(conn, "SELECT (extract(epoch FROM dlock_grace()) * 1e6)::int8");
		if (PQgetisnull(res, 0, 0))
			die("no crash grace runs (dlock_grace() is NULL): pass its end with -G");
		grace_end = load_int64(res, 0, 0);
		PQclear(res);
	}

	/* the leases restored from the table */
	params[0] = meta_prefix;
	res = load_must_params(conn,
				"SELECT name, owner, token FROM dlock_locks WHERE starts_with(name, $1)", 1, params);
	for (int i = 0; i < PQntuples(res); i++)
	{
		int			n = name_index(PQgetvalue(res, i, 0));
		int			c = parse_owner(PQgetvalue(res, i, 1));
		long long	token = load_int64(res, i, 2);

		for (int k = 0; k < nclaims; k++)
			if (claims[k].at_crash && claims[k].name == n && claims[k].client == c &&
				claims[k].token == token)
				claims[k].restored = true;
	}
	PQclear(res);

	if (!none)
		check_grace_covers(grace_end, &at_crash, &restored);

	/*
	 * A new owner takes every name: granted only once no claim runs.
	 * Without a grace, each name is tried once (restored leases hold theirs).
	 */
	for (int n = 0; n < meta_names; n++)
	{
		char		name[160];
		long long	token;
		int64_t		ack;

		snprintf(name, sizeof(name), "%s%d", meta_prefix, n);
		params[0] = name;
		params[1] = "crashload-after";
		res = load_must_params(conn, none ? "SELECT dlock_try($1, '1 s', $2)"
							   : "SELECT dlock_acquire($1, '1 s', '2 minutes', $2)", 2, params);
		ack = wall_us();
		if (PQgetisnull(res, 0, 0))
		{
			if (!none)
				die("dlock_acquire of %s returned NULL", name);
			PQclear(res);
			continue;
		}
		token = load_int64(res, 0, 0);
		PQclear(res);
		if (granted++ == 0)
			first_ack = ack;
		last_ack = ack;
		check_after_grant(n, token, ack);
		if (token <= max_token)
			violation("%s: token %lld after the restart is not above the largest token seen, %lld",
					  name, token, max_token);
		PQclear(load_must_params(conn, "SELECT dlock_release($1, $2)", 2, params));
	}
	PQfinish(conn);

	printf("grace: clients %d, names %d (prefix %s), ttl %.0f s; tokens seen %d, max token %s\n",
		   meta_clients, meta_names, meta_prefix, meta_ttl_us / 1e6, nseen,
		   fmt_token(max_token, b1, sizeof(b1)));
	printf("grace: claims %d, held at the crash %d: restored %d, lost %d\n",
		   nclaims, at_crash, restored, at_crash - restored);
	if (none)
		printf("grace: no grace; a new owner granted %d of the %d names at once\n", granted, meta_names);
	else
		printf("grace: grace ends at %.6f; a new owner granted every name from %+.3f s to %+.3f s of it\n",
			   grace_end / 1e6, (first_ack - grace_end) / 1e6, (last_ack - grace_end) / 1e6);
	printf("grace: violations %d\n", nviolations);
	printf("grace: %s\n", nviolations == 0 ? "OK" : "FAILED");
	return nviolations == 0 ? 0 : 1;
}

/*
 * The self-test: doctored client logs (in a scratch directory) and grants
 * after a restart, each with the violations the checks must report.
 */
typedef struct SelfCase
{
	const char *what;
	const char *log1;			/* client 1's log; times in s from a base */
	const char *log2;			/* client 2's */
	double		after_ack;		/* a grant of k0 after the restart; 0: none */
	double		grace_end;		/* checked against the lost leases; 0: not */
	int			expect;			/* violations */
} SelfCase;

static const SelfCase self_cases[] = {
	{"two clients told they hold k0 at once",
		"GRANT k0 1 try @0\nEND time @20\n", "GRANT k0 2 try @5\nEND time @20\n", 0, 0, 1},
	{"the second grant after the first one's ttl",
		"GRANT k0 1 try @0\nEND time @20\n", "GRANT k0 2 try @10.1\nEND time @20\n", 0, 0, 0},
	{"the second grant after the first one's release",
		"GRANT k0 1 try @0\nRELEASE k0 1 ok @2\nEND time @20\n", "GRANT k0 2 try @3\nEND time @20\n", 0, 0, 0},
	{"a renewal moves the end",
		"GRANT k0 1 try @0\nRENEW k0 =18 @8\nEND time @20\n", "GRANT k0 2 try @12\nEND time @20\n", 0, 0, 1},
	{"a grant after the restart while a lost lease runs",
		"GRANT k0 1 try @0\nEND connection-lost @1\n", "END connection-lost @1\n", 5, 0, 1},
	{"a grant after the restart once the lost lease ended",
		"GRANT k0 1 try @0\nEND connection-lost @1\n", "END connection-lost @1\n", 10.5, 0, 0},
	{"a grace that ends before a lost lease does",
		"GRANT k0 1 try @0\nEND connection-lost @1\n", "END connection-lost @1\n", 0, 8, 1},
	{"a grace that covers the lost lease",
		"GRANT k0 1 try @0\nEND connection-lost @1\n", "END connection-lost @1\n", 0, 11, 0},
	{"a release in flight at the crash, then a waiter's grant",
		"GRANT k0 1 try @0\nLOST release k0 @2\nEND connection-lost @2\n",
		"GRANT k0 2 acquire @2.5\nEND connection-lost @3\n", 0, 0, 0},
	{"a renewal that may find the lease ended, and does",
		"GRANT k0 1 try @0\nNORENEW k0 @10.0005\nEND time @20\n", "END time @20\n", 0, 0, 0},
	{"a renewal that finds the lease ended before its ttl",
		"GRANT k0 1 try @0\nNORENEW k0 @9\nEND time @20\n", "END time @20\n", 0, 0, 1},
};

/* Writes a doctored log: "EVENT args @t" lines, sent at t and answered 1 ms later. */
static void
write_self_log(const char *path, const char *text, int64_t base)
{
	FILE	   *f = fopen(path, "w");
	long		seq = 0;
	const char *p = text;

	if (f == NULL)
		die("could not write \"%s\": %s", path, strerror(errno));
	while (*p)
	{
		const char *nl = strchr(p, '\n');
		const char *at = strchr(p, '@');
		char		ev[128];
		int64_t		t = base + (int64_t) (strtod(at + 1, NULL) * 1e6);
		char	   *eq;

		snprintf(ev, sizeof(ev), "%.*s", (int) (at - p - 1), p);
		/* "=S": an expiry S seconds from the base, as a renewal returns it */
		if ((eq = strchr(ev, '=')) != NULL)
			snprintf(eq, sizeof(ev) - (eq - ev), "%.6f", (base + strtod(eq + 1, NULL) * 1e6) / 1e6);
		fprintf(f, "%ld %lld %lld %s\n", ++seq, (long long) t, (long long) t + 1000, ev);
		p = nl + 1;
	}
	fclose(f);
}

static int
selftest_main(void)
{
	char		dir[] = "/tmp/crashload-self-test-XXXXXX";
	char		path[4096];
	int			failed = 0;
	int64_t		base = (int64_t) 1700000000 * 1000000;

	if (mkdtemp(dir) == NULL)
		die("could not create a scratch directory: %s", strerror(errno));
	for (size_t i = 0; i < sizeof(self_cases) / sizeof(self_cases[0]); i++)
	{
		const SelfCase *sc = &self_cases[i];
		Counts		cnt;
		FILE	   *meta;

		/* a fresh state per case */
		memset(beliefs, 0, sizeof(beliefs));
		nseen = nclaims = nviolations = 0;
		nexpired = 0;
		memset(&cnt, 0, sizeof(cnt));

		snprintf(path, sizeof(path), "%s/meta", dir);
		if ((meta = fopen(path, "w")) == NULL)
			die("could not write \"%s\": %s", path, strerror(errno));
		fprintf(meta, "clients 2\nnames 1\nprefix k\nttl 10\n");
		fclose(meta);
		snprintf(path, sizeof(path), "%s/client-1.log", dir);
		write_self_log(path, sc->log1, base);
		snprintf(path, sizeof(path), "%s/client-2.log", dir);
		write_self_log(path, sc->log2, base);

		printf("self-test: %s\n", sc->what);
		(void) read_logs(dir, &cnt);
		if (sc->after_ack > 0)
			check_after_grant(0, 99, base + (int64_t) (sc->after_ack * 1e6));
		if (sc->grace_end > 0)
		{
			int			at_crash = 0;
			int			restored = 0;

			check_grace_covers(base + (int64_t) (sc->grace_end * 1e6), &at_crash, &restored);
		}
		printf("self-test: %d violation(s), expected %d: %s\n", nviolations, sc->expect,
			   nviolations == sc->expect ? "ok" : "WRONG");
		failed += nviolations != sc->expect;
	}
	snprintf(path, sizeof(path), "%s/meta", dir);
	unlink(path);
	for (int c = 1; c <= 2; c++)
	{
		snprintf(path, sizeof(path), "%s/client-%d.log", dir, c);
		unlink(path);
	}
	rmdir(dir);
	printf("self-test: %s\n", failed ? "FAILED" : "OK");
	return failed ? 1 : 0;
}

/* =================================================================== */

static void
usage(void)
{
	fprintf(stderr,
			"usage: crashload run -d CONNINFO -o LOGDIR [-c CLIENTS] [-t SECONDS] [-n NAMES]\n"
			"                     [-p PREFIX] [-s SEED] [-T TTL]\n"
			"       crashload check -d CONNINFO -o LOGDIR [-m | -f | -u]\n"
			"       crashload grace -d CONNINFO -o LOGDIR [-G GRACE_END]\n"
			"       crashload self-test\n");
	exit(2);
}

int
main(int argc, char **argv)
{
	Options		o = {
		.load = {.conninfo = "", .clients = 8, .seconds = 10, .names = 32},
		.dir = NULL,
		.prefix = "k",
		.seed = 0,
		.ttl_s = 600,
		.memory = false,
		.failover = false,
		.unflushed = false,
		.grace_end = NULL,
	};
	const char *mode;
	int			opt;

	if (argc < 2)
		usage();
	mode = argv[1];
	if (strcmp(mode, "self-test") == 0)
		return selftest_main();
	load_must_fmt = "crashload: query failed: %s\n%s\n";
	optind = 2;
	o.seed = (unsigned int) time(NULL) ^ (unsigned int) getpid();
	while ((opt = getopt(argc, argv, "d:o:c:t:n:p:s:T:G:mfu")) != -1)
	{
		switch (opt)
		{
			case 'o':
				o.dir = optarg;
				break;
			case 'p':
				o.prefix = optarg;
				break;
			case 's':
				o.seed = (unsigned int) strtoul(optarg, NULL, 10);
				break;
			case 'T':
				o.ttl_s = atoi(optarg);
				break;
			case 'm':
				o.memory = true;
				break;
			case 'f':
				o.failover = true;
				break;
			case 'u':
				o.unflushed = true;
				break;
			case 'G':
				o.grace_end = optarg;
				break;
			default:
				if (!load_option(&o.load, opt, optarg))
					usage();
		}
	}
	if (o.dir == NULL || o.load.clients < 1 || o.load.clients > MAX_CLIENTS ||
		o.load.names < 1 || o.load.names > MAX_NAMES || o.load.seconds < 1 ||
		strlen(o.prefix) == 0 || strlen(o.prefix) > 100 || o.ttl_s < 1)
		usage();
	snprintf(o.ttl, sizeof(o.ttl), "%d seconds", o.ttl_s);
	setvbuf(stdout, NULL, _IOLBF, 0);

	if (strcmp(mode, "run") == 0)
	{
		printf("crashload: %d clients, %d s, %d names %s0..%s%d, seed %u\n",
			   o.load.clients, o.load.seconds, o.load.names, o.prefix, o.prefix, o.load.names - 1, o.seed);
		return run_main(&o);
	}
	if (strcmp(mode, "check") == 0)
		return check_main(&o);
	if (strcmp(mode, "grace") == 0)
		return grace_main(&o);
	usage();
	return 2;
}
