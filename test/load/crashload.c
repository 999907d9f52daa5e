/*
 * crashload.c
 *		Load client and checker for dlock's crash tests (test/tap/020_crash.pl).
 *
 * crashload run -d CONNINFO -o LOGDIR [-c CLIENTS] [-t SECONDS] [-n NAMES]
 *               [-p PREFIX] [-s SEED] [-T TTL]
 *
 *	Forks CLIENTS clients (default 8).  Client N uses owner "cN" on its own
 *	connection and, for a loop of at most SECONDS, calls dlock_try,
 *	dlock_acquire (short timeout), dlock_renew and dlock_release on the names
 *	PREFIX0 .. PREFIX(NAMES-1), all in autocommit, with a ttl of minutes so
 *	that nothing expires during a test.  Now and then it also runs, on a
 *	second connection with owner "cNtx", "BEGIN; SELECT dlock_try(...)" and
 *	leaves that transaction open (the next such step rolls it back first), so
 *	that some tokens are returned by transactions that never commit.
 *
 *	Every answer of the server is appended at once (one write(2) per line,
 *	no buffering in the client) to LOGDIR/client-N.log with a sequence
 *	number, so that after the server is killed the log says exactly what
 *	each client was told:
 *
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
 * crashload check -d CONNINFO -o LOGDIR [-m | -f]
 *
 *	After the restart: reads the logs (and LOGDIR/meta written by run) and
 *	the server's dlock_locks/dlock_leases, and verifies
 *	  (a) every lease whose last acknowledged event was an autocommit GRANT
 *		  or RENEW, not released afterwards, is in dlock_locks with the same
 *		  owner and token (and, after a RENEW, an expiry no earlier than the
 *		  one acknowledged and no later than its ttl from now); acknowledged
 *		  releases stay released; no lease taken in a transaction that never
 *		  committed is revived;
 *	  (b) no name has two owners: not in the clients' view at the end, not in
 *		  dlock_locks, and dlock_leases agrees with dlock_locks;
 *	  (c) a dlock_try on a fresh name returns a token above every token any
 *		  client ever saw (UNCOMMITTED ones included);
 *	plus what the logs alone can show: no token was handed out twice, and
 *	while the server was up every answer agreed with the client's leases
 *	(a holder's re-grant has the same token, renew/release of a held lease
 *	succeed, of an unheld one fail).
 *	With -m (memory-only mode, dlock.durable = off) the leases must all be
 *	gone instead of present; (b) and (c) still apply.
 *	With -f (after a failover to an asynchronous standby) leases may be
 *	missing or older than the clients' last view, but every lease present
 *	must be one its owner was granted, with that token; (b) and (c) apply.
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

#define MAX_CLIENTS		64
#define MAX_NAMES		1024
#define LINE_MAX_LEN	1024

typedef struct Options
{
	LoadOptions load;			/* -d, -c, -t, -n (-s: seed below) */
	const char *dir;
	const char *prefix;
	unsigned int seed;
	const char *ttl;
	bool		memory;
	bool		failover;
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

/* Appends one line "seq ..." to the client's log with a single write(2). */
static void
logline(const char *fmt,...)
{
	char		buf[LINE_MAX_LEN];
	int			n;
	int			off = 0;
	va_list		ap;

	n = snprintf(buf, sizeof(buf), "%ld ", ++log_seq);
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
	PGresult   *res = PQexecPrepared(conn, stmt, nparams, values, NULL, NULL, 0);
	char		sqlstate[8];

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
			logline("LOST connect txn %s", last_message);
			return false;
		}
		if (!prepare_all(c->txconn, true))
		{
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
		logline("END connect-failed %s", last_message);
		return 1;
	}
	if (!prepare_all(c.conn, false))
	{
		logline("END prepare-failed %s", last_message);
		return 1;
	}
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
	fprintf(meta, "clients %d\nnames %d\nprefix %s\n", o->load.clients, o->load.names, o->prefix);
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

typedef struct Belief
{
	long long	token;			/* held lease, 0 = none */
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

static Belief beliefs[MAX_CLIENTS + 1][MAX_NAMES];
static TokenSeen *seen;
static int	nseen;
static int	maxseen;
static int	nviolations;

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

static int	meta_clients;
static int	meta_names;
static char meta_prefix[128];

static void
read_meta(const char *dir)
{
	char		path[4096];
	FILE	   *f;

	snprintf(path, sizeof(path), "%s/meta", dir);
	f = fopen(path, "r");
	if (f == NULL)
		die("could not read \"%s\": %s", path, strerror(errno));
	if (fscanf(f, "clients %d\nnames %d\nprefix %127s", &meta_clients, &meta_names, meta_prefix) != 3)
		die("bad meta file \"%s\"", path);
	fclose(f);
	if (meta_clients < 1 || meta_clients > MAX_CLIENTS || meta_names < 1 || meta_names > MAX_NAMES)
		die("bad meta file \"%s\"", path);
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
		if (sscanf(line, "%ld %31s %255s %255s %255s", &seq, ev, a1, a2, a3) < 2)
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
			if (strcmp(a1, "release") == 0 && b->token != 0)
				b->lost_release = true;
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

		if (strcmp(ev, "GRANT") == 0)
		{
			long long	token = strtoll(a2, NULL, 10);

			cnt->grants++;
			if (token <= 0)
				violation("client %d: bad token in \"%s\"", client, line);
			if (b->token != 0 && b->token != token)
				violation("client %d: re-grant of %s held with token %lld returned %lld (line %ld)",
						  client, a1, b->token, token, seq);
			if (b->token == 0)
				add_seen(token, ++(*epoch), client, idx, 'G');
			b->token = token;
			b->renewed_last = false;
			forget_releases(beliefs[client]);
		}
		else if (strcmp(ev, "BUSY") == 0)
		{
			cnt->busy++;
			if (b->token != 0)
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
			forget_releases(beliefs[client]);
		}
		else if (strcmp(ev, "NORENEW") == 0)
		{
			cnt->norenews++;
			if (b->token != 0)
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
			if (ok != should)
				violation("client %d: release of %s with token %s (held: %lld) returned %s (line %ld)",
						  client, a1, a2, b->token, a3, seq);
			if (ok)
			{
				b->released = b->token;
				b->token = 0;
				b->renewed_last = false;
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

static int
check_main(const Options *o)
{
	Counts		cnt;
	int			epoch = 0;
	long long	max_token = 0;
	int			expected = 0;
	int			found = 0;
	int			matched = 0;
	int			held = 0;
	int			uncertain_release = 0;
	int			uncertain_grant = 0;
	int			expiries_checked = 0;
	int			lost_releases = 0;
	int			holders_at_end[MAX_NAMES];
	PGconn	   *conn;
	PGresult   *res;
	PGresult   *rows;
	const char *params[2];
	char		fresh[160];
	long long	first_new = 0;
	char		b1[96],
				b2[96];

	memset(&cnt, 0, sizeof(cnt));
	read_meta(o->dir);
	for (int c = 1; c <= meta_clients; c++)
		read_client_log(o->dir, c, &cnt, &epoch);

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
	 * (b) in the clients' view: at most one holder per name at the end.  A
	 * holder whose release was in flight at the crash does not count: that
	 * release may have committed and handed the lease to a waiter, whose
	 * answer did arrive.
	 */
	for (int n = 0; n < meta_names; n++)
	{
		holders_at_end[n] = 0;
		for (int c = 1; c <= meta_clients; c++)
			if (beliefs[c][n].token != 0 && !beliefs[c][n].lost_release)
				holders_at_end[n]++;
		if (holders_at_end[n] > 1)
			violation("%s%d: %d clients were told they hold it", meta_prefix, n, holders_at_end[n]);
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
		if (n < 0)
			continue;			/* not a client's name (e.g. a checker's) */
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
		if (o->failover)
		{
			/*
			 * Asynchronous replication: the lease must be one this client
			 * was granted on this name at some point (or a grant in flight),
			 * though perhaps not its last state.
			 */
			bool		granted = b->lost_grant;

			for (int k = 0; k < nseen && !granted; k++)
				granted = seen[k].token == token && seen[k].kind == 'G' &&
					seen[k].client == c && seen[k].name == n;
			if (!granted)
				violation("%s: lease of %s with token %lld, which no client was granted on this name",
						  name, owner, token);
			else
				matched++;
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

	if (!o->memory && !o->failover)
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
	 * (b) the lease table agrees with dlock_locks.  Only the clients' names:
	 * other checkers running at the same time take and release fresh names,
	 * and a row's snapshot and the live shared memory may disagree on those.
	 */
	rows = load_must_params(conn,
				 "SELECT l.name, l.owner, l.token, k.owner, k.token"
				 " FROM dlock_leases l LEFT JOIN dlock_locks k USING (name)"
				 " WHERE starts_with(l.name, $1) AND l.expires_at > now()"
				 "   AND (k.name IS NULL OR k.owner <> l.owner OR k.token <> l.token)",
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
		res = load_must_params(conn, "SELECT dlock_try($1, '1 minute', 'crashload-checker')", 1, params);
		if (PQgetisnull(res, 0, 0))
			die("dlock_try on the fresh name %s returned NULL", fresh);
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
		   o->memory ? "memory-only" : o->failover ? "failover" : "durable",
		   meta_clients, meta_names, meta_prefix);
	printf("checker: events %ld: grants %ld, busy %ld, uncommitted %ld, renews %ld (null %ld),"
		   " releases ok %ld fail %ld, rollbacks %ld, lost in the crash %ld, errors %ld\n",
		   cnt.events, cnt.grants, cnt.busy, cnt.uncommitted, cnt.renews, cnt.norenews,
		   cnt.releases_ok, cnt.releases_fail, cnt.rollbacks, cnt.lost, cnt.errors);
	printf("checker: held at the crash %d; uncertain: %d with a release in flight, %d with a grant in flight\n",
		   held, uncertain_release, uncertain_grant);
	printf("checker: leases expected %d, found %d, matched %d (renewed expiry checked on %d),"
		   " back after a release the crash lost %d\n",
		   o->memory || o->failover ? 0 : expected, found, matched, expiries_checked,
		   lost_releases);
	printf("checker: tokens seen %d, max token %s\n", nseen, fmt_token(max_token, b1, sizeof(b1)));
	printf("checker: first new token %s\n", fmt_token(first_new, b1, sizeof(b1)));
	printf("checker: violations %d\n", nviolations);
	printf("checker: %s\n", nviolations == 0 ? "OK" : "FAILED");
	return nviolations == 0 ? 0 : 1;
}

/* =================================================================== */

static void
usage(void)
{
	fprintf(stderr,
			"usage: crashload run -d CONNINFO -o LOGDIR [-c CLIENTS] [-t SECONDS] [-n NAMES]\n"
			"                     [-p PREFIX] [-s SEED] [-T TTL]\n"
			"       crashload check -d CONNINFO -o LOGDIR [-m | -f]\n");
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
		.ttl = "10 minutes",
		.memory = false,
		.failover = false,
	};
	const char *mode;
	int			opt;

	if (argc < 2)
		usage();
	mode = argv[1];
	load_must_fmt = "crashload: query failed: %s\n%s\n";
	optind = 2;
	o.seed = (unsigned int) time(NULL) ^ (unsigned int) getpid();
	while ((opt = getopt(argc, argv, "d:o:c:t:n:p:s:T:mf")) != -1)
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
				o.ttl = optarg;
				break;
			case 'm':
				o.memory = true;
				break;
			case 'f':
				o.failover = true;
				break;
			default:
				if (!load_option(&o.load, opt, optarg))
					usage();
		}
	}
	if (o.dir == NULL || o.load.clients < 1 || o.load.clients > MAX_CLIENTS ||
		o.load.names < 1 || o.load.names > MAX_NAMES || o.load.seconds < 1 ||
		strlen(o.prefix) == 0 || strlen(o.prefix) > 100)
		usage();
	setvbuf(stdout, NULL, _IOLBF, 0);

	if (strcmp(mode, "run") == 0)
	{
		printf("crashload: %d clients, %d s, %d names %s0..%s%d, seed %u\n",
			   o.load.clients, o.load.seconds, o.load.names, o.prefix, o.prefix, o.load.names - 1, o.seed);
		return run_main(&o);
	}
	if (strcmp(mode, "check") == 0)
		return check_main(&o);
	usage();
	return 2;
}
