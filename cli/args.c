/*
 * args.c
 *		The command line of dlock: options, subcommands and their checks,
 *		durations, default owners, and the help text.
 *
 * Copyright: the dlock authors; same licence as the extension.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "args.h"
#include "msg.h"

/* DLOCK_CLI_VERSION: the extension's version, from cli/Makefile */
#ifndef DLOCK_CLI_VERSION
#error "DLOCK_CLI_VERSION is not defined: build with cli/Makefile"
#endif

#define DEFAULT_TTL_MS		30000
#define DEFAULT_GRACE_MS	5000
#define MIN_TTL_MS			1000
#define MAX_TTL_MS			(7 * 86400 * (int64_t) 1000)	/* the server's limit */
#define MAX_DURATION_MS		MAX_TTL_MS	/* of any DUR argument */
#define MAX_OWNER_LEN		128

/*
 * Parses a duration: a non-negative decimal number with an optional unit
 * (ms, s, m, h, d and their long forms; seconds by default).  Returns 1 and
 * sets *out, 0 if s is not a duration, -1 if it is longer than
 * MAX_DURATION_MS.
 */
static int
parse_duration(const char *s, ms_t *out)
{
	static const struct
	{
		const char *unit;
		double		ms;
	}			units[] = {
		{"", 1000}, {"ms", 1}, {"msec", 1}, {"msecs", 1},
		{"millisecond", 1}, {"milliseconds", 1},
		{"s", 1000}, {"sec", 1000}, {"secs", 1000},
		{"second", 1000}, {"seconds", 1000},
		{"m", 60000}, {"min", 60000}, {"mins", 60000},
		{"minute", 60000}, {"minutes", 60000},
		{"h", 3600000}, {"hour", 3600000}, {"hours", 3600000},
		{"d", 86400000}, {"day", 86400000}, {"days", 86400000},
	};
	char	   *end;
	double		v;

	if (!isdigit((unsigned char) s[0]) && s[0] != '.')
		return 0;
	errno = 0;
	v = strtod(s, &end);
	if (end == s || (errno != 0 && errno != ERANGE) || isnan(v) || v < 0)
		return 0;
	while (*end == ' ')
		end++;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
	{
		if (strcmp(end, units[i].unit) == 0)
		{
			/* rounded to whole ms before the check: 7d + 0.4ms is 7 days */
			double		ms = v * units[i].ms + 0.5;

			if (!isfinite(ms) || ms >= (double) MAX_DURATION_MS + 1)
				return -1;
			*out = (ms_t) ms;	/* ms >= 0.5: truncation rounds */
			return 1;
		}
	}
	return 0;
}

static void
usage(FILE *f)
{
	fprintf(f,
			"dlock runs a command while holding a dlock lease, and takes, releases and lists leases.\n"
			"\n"
			"Usage:\n"
			"  dlock [OPTION]... run [--ttl DUR] [--timeout DUR | --no-wait | --queue]\n"
			"                        [--grace DUR] [--at-least DUR] [--lifetime ttl|session]\n"
			"                        [--shared | --permits N]\n"
			"                        [--owner OWNER] NAME -- COMMAND [ARG]...\n"
			"  dlock [OPTION]... try [--ttl DUR] [--shared | --permits N] [--owner OWNER] NAME\n"
			"  dlock [OPTION]... release --owner OWNER [--token TOKEN] NAME\n"
			"  dlock [OPTION]... status [NAME]\n"
			"  dlock [OPTION]... watch [--json] [NAME]...\n"
			"  dlock --help | --version\n"
			"\n"
			"run   takes the lease (waiting for it unless --no-wait), runs COMMAND in a process\n"
			"      group of its own with DLOCK_NAME, DLOCK_OWNER and DLOCK_TOKEN set, renews the\n"
			"      lease every third of its TTL, forwards SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1\n"
			"      and SIGUSR2 to the group, and releases the lease once COMMAND and every process\n"
			"      it started are gone (on Linux also those that left the group: setsid, daemons).\n"
			"      If the lease is lost (a renewal finds it gone, or none succeeds before it may\n"
			"      end), or COMMAND exits leaving processes behind, they all get SIGTERM, then\n"
			"      SIGKILL after the grace period.\n"
			"try   takes the lease if it is free and prints \"TOKEN OWNER\"; it is not renewed.\n"
			"release  releases OWNER's lease on NAME (only with TOKEN, if given).\n"
			"status   lists holders and waiters (of NAME, or of every name).\n"
			"watch    prints each change event of the NAMEs (of every name without one) as it\n"
			"         happens, one line each (leases granted with dlock.events on); it runs until\n"
			"         its connection is lost (exit 77) or a signal ends it.\n"
			"\n"
			"Options (before or after the subcommand):\n"
			"  -d CONNINFO, --dbname=CONNINFO\n"
			"                         connection string or URI (after -d, as the next argument);\n"
			"                         otherwise libpq's defaults and PGHOST, PGPORT, PGDATABASE,\n"
			"                         PGUSER, PGSERVICE, ...\n"
			"  -v, --verbose          report grants, renewals and forwarded signals on stderr\n"
			"  -h, --help             show this help\n"
			"      --version          show the version\n"
			"  --ttl=DUR              lease time (default 30s; at least 1s)\n"
			"  --timeout=DUR          run: wait at most DUR for the lease (default: forever;\n"
			"                         0 is --no-wait)\n"
			"  --no-wait              run: exit 69 at once if the lease is busy\n"
			"  --queue                run: wait as a queued request (dlock_enqueue, asked again\n"
			"                         every second, or tenth of the TTL if less) instead of a\n"
			"                         blocked call: behind a transaction-pooling PgBouncer it\n"
			"                         holds no server connection while it waits; same FIFO\n"
			"                         queue, same --timeout; not with --at-least or --lifetime\n"
			"                         session\n"
			"  --at-least=DUR         run: keep the lease at least DUR from its grant, even if\n"
			"                         COMMAND ends sooner (at most the TTL): with --no-wait, a\n"
			"                         job started on several hosts within DUR runs once\n"
			"  --lifetime=LIFETIME    run: ttl (default: the lease outlives a lost connection,\n"
			"                         and a killed dlock, until its TTL) or session (it ends\n"
			"                         with dlock's connection: a killed dlock frees NAME at\n"
			"                         once, and a lost connection loses the lease)\n"
			"  --shared               run, try: a shared lease (others may hold shared ones too)\n"
			"  --permits=N            run, try: one of N permits of a semaphore (at most N hold\n"
			"                         NAME at once; every holder must give the same N)\n"
			"  --grace=DUR            run: SIGTERM to SIGKILL (default 5s, or a quarter of the\n"
			"                         TTL if less; must be less than half the TTL)\n"
			"  --owner=OWNER          lease owner (default dlock-run:HOST:PID, dlock-try:HOST:PID)\n"
			"  --token=TOKEN          release: only the lease with this fencing token\n"
			"  --json                 watch: print each event's JSON payload\n"
			"DUR is a number with an optional unit: ms, s, m, h, d (default s): 500ms, 1.5s, 2m;\n"
			"at most 7 days.\n"
			"\n"
			"Exit status:\n"
			"  run: the command's status, or 128+N if signal N killed it; or one of\n"
			"    64 usage error               69 lease busy (--no-wait; try)\n"
			"    70 the server refused a call (or the extension is not installed)\n"
			"    71 system error (fork, pipe)\n"
			"    75 timed out waiting         76 lease lost (the command was terminated)\n"
			"    77 connection failure        126 command not executable, 127 not found\n"
			"    128+N interrupted by signal N before the command started\n"
			"  release: 0 released, 1 nothing to release; status NAME: 0 held, 1 not held.\n"
			"  dlock prints a message on stderr whenever the status is its own.\n");
}

static void usage_error(const char *fmt,...) DLOCK_PRINTF(1, 2) DLOCK_NORETURN;

static void
usage_error(const char *fmt,...)
{
	va_list		ap;

	va_start(ap, fmt);
	msg_va(fmt, ap);
	va_end(ap);
	fprintf(stderr, "Try \"%s --help\" for more information.\n", progname);
	exit(EXIT_USAGE);
}

/*
 * Returns the value of -d or --dbname, which getopt_long() just returned.  The
 * short option takes its value only as the next argument, so that a word
 * such as "-debug" is not read as "-d ebug": a connection string.
 */
static const char *
dbname_option(char **argv, int longindex)
{
	if (longindex < 0 && optarg != argv[optind - 1])
		usage_error("unknown option \"%s\" (-d takes its connection string as the next argument: -d CONNINFO, or --dbname=CONNINFO)",
					argv[optind - 1]);
	return optarg;
}

/* Reports a getopt_long() error for argv: c is ':' or '?'. */
static void
option_error(int c, char **argv)
{
	if (c == ':')
		usage_error("option %s needs an argument", argv[optind - 1]);
	if (optopt != 0)
		usage_error("unknown option -%c", optopt);
	usage_error("unknown option %s", argv[optind - 1]);
}

static ms_t
duration_arg(const char *opt, const char *val)
{
	ms_t		ms = 0;

	switch (parse_duration(val, &ms))
	{
		case 0:
			usage_error("invalid duration for --%s: \"%s\" (examples: 30s, 500ms, 2m)", opt, val);
			break;
		case -1:
			usage_error("--%s must be at most 7 days: \"%s\"", opt, val);
			break;
	}
	return ms;
}

/*
 * --lifetime: ttl or session.  A transaction lease would end with the
 * statement that takes it (dlock's calls run in autocommit), before COMMAND
 * starts.
 */
static void
lifetime_arg(Args *a, const char *val)
{
	if (strcmp(val, "transaction") == 0)
		usage_error("--lifetime transaction is refused: the lease would end with the statement that takes it (dlock's calls run in autocommit), before COMMAND starts; use ttl or session");
	if (strcmp(val, "ttl") != 0 && strcmp(val, "session") != 0)
		usage_error("invalid --lifetime: \"%s\" (ttl or session)", val);
	a->lifetime = val;
}

static char *
default_owner(const char *kind)
{
	char		host[256];
	static char owner[MAX_OWNER_LEN + 1];

	if (gethostname(host, sizeof(host)) != 0)
		snprintf(host, sizeof(host), "unknown");
	host[sizeof(host) - 1] = '\0';
	/* keep the pid when the host name is long */
	snprintf(owner, sizeof(owner), "dlock-%s:%.*s:%d", kind,
			 MAX_OWNER_LEN - 24, host, (int) getpid());
	return owner;
}

enum
{
	OPT_TTL = 1000,
	OPT_TIMEOUT,
	OPT_NOWAIT,
	OPT_QUEUE,
	OPT_GRACE,
	OPT_AT_LEAST,
	OPT_LIFETIME,
	OPT_OWNER,
	OPT_TOKEN,
	OPT_SHARED,
	OPT_PERMITS,
	OPT_JSON,
	OPT_VERSION
};

/* the options that may also come before the subcommand */
#define GLOBAL_OPTIONS \
	{"dbname", required_argument, NULL, 'd'}, \
	{"verbose", no_argument, NULL, 'v'}, \
	{"help", no_argument, NULL, 'h'}, \
	{"version", no_argument, NULL, OPT_VERSION}

static const struct option global_options[] = {
	GLOBAL_OPTIONS,
	{NULL, 0, NULL, 0}
};

static const struct option subcommand_options[] = {
	GLOBAL_OPTIONS,
	{"ttl", required_argument, NULL, OPT_TTL},
	{"timeout", required_argument, NULL, OPT_TIMEOUT},
	{"no-wait", no_argument, NULL, OPT_NOWAIT},
	{"queue", no_argument, NULL, OPT_QUEUE},
	{"grace", required_argument, NULL, OPT_GRACE},
	{"at-least", required_argument, NULL, OPT_AT_LEAST},
	{"lifetime", required_argument, NULL, OPT_LIFETIME},
	{"owner", required_argument, NULL, OPT_OWNER},
	{"token", required_argument, NULL, OPT_TOKEN},
	{"shared", no_argument, NULL, OPT_SHARED},
	{"permits", required_argument, NULL, OPT_PERMITS},
	{"json", no_argument, NULL, OPT_JSON},
	{NULL, 0, NULL, 0}
};

/* which options with a default were given, for the checks */
typedef struct
{
	bool		ttl;
	bool		timeout;
	bool		grace;
	bool		at_least;
} Given;

/*
 * Reads the options of argv into *a with getopt_long(), from optind on,
 * until it returns -1.  Both passes, before and after the subcommand, come
 * here; the table they pass says which options they accept.  Exits after
 * --help and --version, and on an error.
 */
static void
read_options(int argc, char **argv, const char *optstring,
			 const struct option *options, Args *a, Given *given)
{
	for (;;)
	{
		int			longindex = -1;
		int			optc = getopt_long(argc, argv, optstring, options, &longindex);

		if (optc == -1)
			return;
		switch (optc)
		{
			case 'd':
				a->conninfo = dbname_option(argv, longindex);
				break;
			case 'v':
				a->verbose = true;
				break;
			case 'h':
				usage(stdout);
				exit(0);
			case OPT_VERSION:
				printf("dlock %s\n", DLOCK_CLI_VERSION);
				exit(0);
			case OPT_TTL:
				a->ttl_ms = duration_arg("ttl", optarg);
				given->ttl = true;
				break;
			case OPT_TIMEOUT:
				a->timeout_ms = duration_arg("timeout", optarg);
				given->timeout = true;
				break;
			case OPT_NOWAIT:
				a->nowait = true;
				break;
			case OPT_QUEUE:
				a->queue = true;
				break;
			case OPT_GRACE:
				a->grace_ms = duration_arg("grace", optarg);
				given->grace = true;
				break;
			case OPT_AT_LEAST:
				a->at_least_ms = duration_arg("at-least", optarg);
				given->at_least = true;
				break;
			case OPT_LIFETIME:
				lifetime_arg(a, optarg);
				break;
			case OPT_OWNER:
				a->owner = optarg;
				break;
			case OPT_TOKEN:
				a->token = optarg;
				break;
			case OPT_SHARED:
				a->mode = "shared";
				break;
			case OPT_PERMITS:
				if (optarg[0] == '\0' || strspn(optarg, "0123456789") != strlen(optarg) ||
					strlen(optarg) > 9 || atoi(optarg) < 1)
					usage_error("--permits must be a whole number from 1");
				a->permits = optarg;
				break;
			case OPT_JSON:
				a->json = true;
				break;
			default:
				option_error(optc, argv);
		}
	}
}

/*
 * Returns the subcommand, argv[i], once checked.  Exits if there is none or
 * it is unknown, and after "help".
 */
static const char *
subcommand(int argc, char **argv, int i)
{
	const char *sub;

	if (i >= argc)
		usage_error("no subcommand given (run, try, release, status or watch)");
	sub = argv[i];
	if (strcmp(sub, "help") == 0)
	{
		usage(stdout);
		exit(0);
	}
	if (strcmp(sub, "run") != 0 && strcmp(sub, "try") != 0 &&
		strcmp(sub, "release") != 0 && strcmp(sub, "status") != 0 &&
		strcmp(sub, "watch") != 0)
		usage_error("unknown subcommand \"%s\" (run, try, release, status or watch)", sub);
	return sub;
}

/* Where the first "--" after argv[0] is, or -1. */
static int
find_dashdash(int argc, char **argv)
{
	for (int k = 1; k < argc; k++)
		if (strcmp(argv[k], "--") == 0)
			return k;
	return -1;
}

/* Exits if an option given does not apply to sub, or has a wrong value. */
static void
check_options(const char *sub, const Args *a, const Given *given, int dashdash)
{
	if (strcmp(sub, "run") != 0 &&
		(given->timeout || a->nowait || a->queue || given->grace || given->at_least))
		usage_error("--timeout, --no-wait, --queue, --grace and --at-least are options of run");
	/* try's session would end as it exits, taking the lease with it */
	if (strcmp(sub, "run") != 0 && a->lifetime != NULL)
		usage_error("--lifetime is an option of run (a lease that dlock try takes must outlive it)");
	if (strcmp(sub, "run") != 0 && strcmp(sub, "try") != 0 && given->ttl)
		usage_error("--ttl is an option of run and try");
	if (strcmp(sub, "release") != 0 && a->token != NULL)
		usage_error("--token is an option of release");
	if (strcmp(sub, "run") != 0 && strcmp(sub, "try") != 0 &&
		(a->permits != NULL || strcmp(a->mode, "shared") == 0))
		usage_error("--shared and --permits are options of run and try");
	if (a->permits != NULL && strcmp(a->mode, "shared") == 0)
		usage_error("--shared and --permits exclude each other");
	if ((strcmp(sub, "status") == 0 || strcmp(sub, "watch") == 0) && a->owner != NULL)
		usage_error("--owner is not an option of %s", sub);
	if (strcmp(sub, "watch") != 0 && a->json)
		usage_error("--json is an option of watch");
	if (a->owner != NULL && (a->owner[0] == '\0' || strlen(a->owner) > MAX_OWNER_LEN))
		usage_error("--owner must be 1 to %d bytes", MAX_OWNER_LEN);
	if (given->ttl && (a->ttl_ms < MIN_TTL_MS || a->ttl_ms > MAX_TTL_MS))
		usage_error("--ttl must be at least 1s and at most 7 days");
	if (a->token != NULL)
	{
		const char *p = a->token;

		if (*p == '-')
			p++;
		if (*p == '\0' || strspn(p, "0123456789") != strlen(p) || strlen(p) > 19)
			usage_error("--token must be an integer");
	}
	if (dashdash >= 0 && strcmp(sub, "run") != 0)
		usage_error("\"--\" is only used by run");
}

/*
 * run's NAME and COMMAND: the npos words at pos before "--" (sargv's
 * dashdash, or -1 without one), and the defaults of its options.
 */
static void
run_arguments(Args *a, const Given *given, char **sargv, int dashdash,
			  char **pos, int npos)
{
	char	  **cmd;

	if (dashdash >= 0)
	{
		if (npos != 1)
			usage_error(npos == 0 ? "run needs a NAME" :
						"run takes one NAME before \"--\"");
		cmd = sargv + dashdash + 1;
	}
	else
	{
		if (npos < 1)
			usage_error("run needs a NAME and a COMMAND");
		cmd = pos + 1;
	}
	if (*cmd == NULL)
		usage_error("run needs a COMMAND after the NAME (dlock run NAME -- COMMAND)");
	if (pos[0][0] == '\0')
		usage_error("NAME must not be empty");
	if (a->nowait && given->timeout)
		usage_error("--no-wait and --timeout exclude each other");
	if (given->timeout && a->timeout_ms == 0)
		a->nowait = true;
	if (a->queue && a->nowait)
		usage_error(given->timeout ? "--queue waits: --timeout 0 (no wait) excludes it" :
					"--queue and --no-wait exclude each other");
	/* dlock_enqueue takes neither: its grant is a memory-only ttl lease */
	if (a->queue && given->at_least)
		usage_error("--queue and --at-least exclude each other");
	if (a->queue && a->lifetime != NULL && strcmp(a->lifetime, "session") == 0)
		usage_error("--queue and --lifetime session exclude each other (a queued request is granted with no connection)");
	if (a->at_least_ms > a->ttl_ms)
		usage_error(given->ttl ? "--at-least must not be longer than the TTL" :
					"--at-least must not be longer than the TTL (default 30s): give --ttl");
	if (!given->grace)
		a->grace_ms = min_ms(DEFAULT_GRACE_MS, a->ttl_ms / 4);
	else if (a->grace_ms * 2 >= a->ttl_ms)
		usage_error("--grace must be less than half the TTL");
	a->command = CMD_RUN;
	a->name = pos[0];
	if (a->owner == NULL)
		a->owner = default_owner("run");
	a->argv = cmd;
}

/* The NAMEs of try, release, status and watch, the npos words at pos. */
static void
name_argument(const char *sub, Args *a, char **pos, int npos)
{
	if (strcmp(sub, "try") == 0)
	{
		if (npos != 1)
			usage_error("try takes one NAME");
		a->command = CMD_TRY;
		a->name = pos[0];
		if (a->owner == NULL)
			a->owner = default_owner("try");
		return;
	}
	if (strcmp(sub, "release") == 0)
	{
		if (npos != 1)
			usage_error("release takes one NAME");
		if (a->owner == NULL)
			usage_error("release needs --owner");
		a->command = CMD_RELEASE;
		a->name = pos[0];
		return;
	}
	if (strcmp(sub, "watch") == 0)
	{
		for (int i = 0; i < npos; i++)
		{
			if (pos[i][0] == '\0')
				usage_error("NAME must not be empty");
		}
		a->command = CMD_WATCH;
		a->names = pos;
		a->nnames = npos;
		return;
	}
	/* status */
	if (npos > 1)
		usage_error("status takes at most one NAME");
	a->command = CMD_STATUS;
	a->name = npos == 1 ? pos[0] : NULL;
}

/*
 * Reads and checks the command line into *a.  Exits on a usage error, and
 * after --help or --version.
 */
void
parse_args(int argc, char **argv, Args *a)
{
	Given		given = {false, false, false, false};
	const char *sub;
	char	  **sargv;
	int			sargc;
	int			dashdash;
	int			nopts;

	*a = (Args)
	{
		.mode = "exclusive",
			.ttl_ms = DEFAULT_TTL_MS,
			.timeout_ms = -1,
	};

	/* options before the subcommand: -d, -v, -h, --version */
	opterr = 0;
	optind = 1;
	read_options(argc, argv, "+:d:vh", global_options, a, &given);
	sub = subcommand(argc, argv, optind);

	/* the subcommand's arguments, with the subcommand as argv[0] */
	sargv = argv + optind;
	sargc = argc - optind;
	dashdash = find_dashdash(sargc, sargv);
	nopts = dashdash >= 0 ? dashdash : sargc;

	/*
	 * run without "--": options stop at NAME, the rest is the command.  With
	 * "--", options may come anywhere before it.
	 */
	optind = 0;					/* 0: start afresh on a new argv */
	read_options(nopts, sargv,
				 strcmp(sub, "run") == 0 && dashdash < 0 ? "+:d:vh" : ":d:vh",
				 subcommand_options, a, &given);

	check_options(sub, a, &given, dashdash);
	if (strcmp(sub, "run") == 0)
		run_arguments(a, &given, sargv, dashdash, sargv + optind, nopts - optind);
	else
		name_argument(sub, a, sargv + optind, nopts - optind);
}
