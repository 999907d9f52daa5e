/*
 * main.c
 *		The dlock command: run a command while holding a dlock lease, and
 *		take, release and list leases from the shell.
 *
 *		dlock run [options] NAME -- COMMAND [ARG]...
 *		dlock try [options] NAME
 *		dlock release --owner OWNER [--token TOKEN] NAME
 *		dlock status [NAME]
 *		dlock watch [--json] [NAME]...
 *
 * This file is the entry point: it reads the command line (args.c) and
 * hands it to the subcommand, "run" in run.c, "watch" in watch.c, the
 * others in oneshot.c.
 *
 * Copyright: the dlock authors; same licence as the extension.
 */
#include "args.h"
#include "msg.h"
#include "oneshot.h"
#include "run.h"
#include "session.h"
#include "watch.h"

int
main(int argc, char **argv)
{
	Args		args;

	parse_args(argc, argv, &args);
	conninfo = args.conninfo;
	verbose = args.verbose;
	switch (args.command)
	{
		case CMD_RUN:
			return cmd_run(&args);
		case CMD_TRY:
			return cmd_try(&args);
		case CMD_RELEASE:
			return cmd_release(&args);
		case CMD_STATUS:
			return cmd_status(&args);
		case CMD_WATCH:
			return cmd_watch(&args);
	}
	return EXIT_USAGE;			/* not reached: parse_args() sets a command */
}
