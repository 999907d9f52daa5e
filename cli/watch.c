/*
 * watch.c
 *		"dlock watch [--json] [NAME]...": LISTEN dlock, and one line on
 *		stdout for each event of the names (of every name without one), as
 *		it arrives; until the connection is lost (exit 77) or a signal.
 *
 * The events are those the server sends with dlock.events on (README.md,
 * "Change events"): one NOTIFY per change, its payload a JSON object whose
 * "name" this file reads to filter.  A "lost" event (the server could not
 * keep some events) concerns every name: it is always printed.
 *
 * Copyright: the dlock authors; same licence as the extension.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loop.h"
#include "msg.h"
#include "session.h"
#include "watch.h"

#define FIELD_MAX	1024		/* a decoded field: names are 200 bytes */

/*
 * Decodes the JSON string value of key in payload (as the server writes it:
 * "key": "...") into out.  Returns false if there is none.
 */
static bool
json_field(const char *payload, const char *key, char *out, size_t len)
{
	char		pat[64];
	const char *p;
	size_t		n = 0;

	snprintf(pat, sizeof(pat), "\"%s\": ", key);
	p = strstr(payload, pat);
	if (p == NULL)
		return false;
	p += strlen(pat);
	if (*p == '"')
	{
		for (p++; *p && *p != '"' && n + 1 < len; p++)
		{
			char		c = *p;

			if (c == '\\')
			{
				p++;
				switch (*p)
				{
					case 'b':
						c = '\b';
						break;
					case 'f':
						c = '\f';
						break;
					case 'n':
						c = '\n';
						break;
					case 'r':
						c = '\r';
						break;
					case 't':
						c = '\t';
						break;
					case 'u':
						/* the server escapes only control characters so */
						if (strlen(p) < 5)
							return false;
						c = (char) strtol((char[]) {p[1], p[2], p[3], p[4], 0}, NULL, 16);
						p += 4;
						break;
					case '\0':
						return false;
					default:
						c = *p;
				}
			}
			out[n++] = c;
		}
	}
	else
	{
		/* a number */
		while (*p && *p != ',' && *p != '}' && n + 1 < len)
			out[n++] = *p++;
	}
	out[n] = '\0';
	return true;
}

static bool
wanted(const Args *a, const char *name)
{
	if (a->nnames == 0)
		return true;
	for (int i = 0; i < a->nnames; i++)
	{
		if (strcmp(a->names[i], name) == 0)
			return true;
	}
	return false;
}

/* One event: its payload, or "EVENT NAME token=... owner=... ...". */
static void
print_event(const Args *a, const char *payload)
{
	char		event[32];
	char		name[FIELD_MAX];
	char		owner[FIELD_MAX];
	char		token[32];
	char		mode[32];
	char		lifetime[32];
	char		seq[32];

	if (!json_field(payload, "event", event, sizeof(event)))
		return;					/* not ours: someone else's NOTIFY dlock */
	if (strcmp(event, "lost") == 0)
	{
		if (a->json)
			printf("%s\n", payload);
		else if (json_field(payload, "count", seq, sizeof(seq)))
			printf("lost count=%s\n", seq);
		return;
	}
	if (!json_field(payload, "name", name, sizeof(name)) || !wanted(a, name))
		return;
	if (a->json)
	{
		printf("%s\n", payload);
		return;
	}
	if (!json_field(payload, "owner", owner, sizeof(owner)) ||
		!json_field(payload, "token", token, sizeof(token)) ||
		!json_field(payload, "mode", mode, sizeof(mode)) ||
		!json_field(payload, "lifetime", lifetime, sizeof(lifetime)) ||
		!json_field(payload, "seq", seq, sizeof(seq)))
		return;
	printf("%s %s token=%s owner=%s mode=%s lifetime=%s seq=%s\n",
		   event, name, token, owner, mode, lifetime, seq);
}

/* "dlock watch": returns only on an error (its exit status). */
int
cmd_watch(const Args *a)
{
	PGresult   *res;

	/* one line per event, as it happens, also into a pipe */
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!connect_db(0))
	{
		msg("cannot connect to the server: %s", last_error);
		return EXIT_CONN;
	}
	if (run_query("LISTEN dlock", 0, NULL, NEVER, &res) != Q_OK)
	{
		msg("cannot listen: %s", last_error);
		return EXIT_CONN;
	}
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
	{
		msg("cannot listen: %s", PQresultErrorMessage(res));
		PQclear(res);
		return EXIT_SERVER;
	}
	PQclear(res);
	vmsg("listening on channel dlock");
	for (;;)
	{
		PGnotify   *n;

		while ((n = PQnotifies(conn)) != NULL)
		{
			print_event(a, n->extra);
			PQfreemem(n);
		}
		if (wait_io(PQsocket(conn), POLLIN, NEVER) < 0 || !PQconsumeInput(conn) ||
			PQstatus(conn) == CONNECTION_BAD)
		{
			char	   *err = PQerrorMessage(conn);

			msg("connection lost: %.*s", (int) strcspn(err, "\n"), err);
			close_conn();
			return EXIT_CONN;
		}
	}
}
