# dlock: distributed leases for PostgreSQL (PGXS build)

EXTENSION = dlock
# the version CREATE EXTENSION installs: dlock.control's default_version
EXTVERSION = $(shell sed -n "s/^default_version *= *'\\(.*\\)'/\\1/p" $(srcdir)/dlock.control)

MODULE_big = dlock
OBJS = src/dlock.o src/settings.o src/engine.o src/keys.o src/credits.o src/counters.o src/watch.o src/listen.o src/tokens.o src/args.o src/wait.o src/overdue.o src/events.o src/lifetime.o src/xact.o src/grace.o src/grantwait.o src/queue.o src/acquire.o src/lease.o src/table.o src/dbslots.o src/rows.o src/floor.o src/sweep.o src/deferred.o src/rebuild.o src/worker.o src/api.o src/views.o src/fence.o
# 1.0's script and every upgrade script after it: CREATE EXTENSION runs 1.0's
# and then the chain up to EXTVERSION; ALTER EXTENSION UPDATE runs the rest
# of the chain.  A change to the SQL goes into the next upgrade script, never
# into a released one (sql/upgrade.sql compares the two ways of getting there).
DATA = $(sort $(wildcard sql/dlock--*.sql))

# pg_regress tests: every sql/*.sql but the extension's own scripts, setup
# (which creates the extension) first; adding a test is adding its files
REGRESS = setup $(sort $(filter-out setup dlock--%,$(basename $(notdir $(wildcard $(srcdir)/sql/*.sql)))))
REGRESS_OPTS = --temp-config=$(srcdir)/test/dlock.conf \
	--temp-instance=./tmp_regress
# isolation specs: every test/isolation/specs/*.spec (expected output in
# test/isolation/expected), helpers (shared functions) first
ISOLATION = helpers $(sort $(filter-out helpers,$(basename $(notdir $(wildcard $(srcdir)/test/isolation/specs/*.spec)))))
ISOLATION_OPTS = --inputdir=test/isolation --outputdir=test/isolation/output \
	--temp-config=$(srcdir)/test/dlock.conf --temp-instance=./tmp_iso \
	--load-extension=dlock
TAP_TESTS = 1
PROVE_TESTS = test/tap/*.pl

PG_CFLAGS = -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers
EXTRA_CLEAN = tmp_regress tmp_iso tmp_check test/isolation/output results regression.diffs regression.out

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
# without PGXS, `test` would be the first target and call make again, forever
ifeq ($(PGXS),)
$(error $(PG_CONFIG) does not work: set PG_CONFIG to a PostgreSQL pg_config)
endif
include $(PGXS)

# PostgreSQL's Debian build has no dependency tracking: a header change
# (a struct's layout) rebuilds every object, never just the changed .c
$(OBJS): $(wildcard $(srcdir)/src/*.h)

# The two commands of the README; both run as root or as a user who can install.
.PHONY: test demo bench valgrind test-versions
test:
	bash test/run-tests.sh
# regress, isolation, TAP and a 30 s fuzz on PostgreSQL 15, 17 and 18, each in
# a Debian root of its own (tools/root.sh; as root); DLOCK_VERSIONS chooses
test-versions:
	bash test/versions.sh
demo:
	bash tools/demo.sh
bench:
	bash bench/run.sh
	bash bench/queue.sh
# queued requests at scale: 2,000 clients through PgBouncer, a checker over
# the grants, figures into bench/QUEUE.md (bench/queue.sh; about 2 minutes)
.PHONY: bench-queue
bench-queue: install
	bash bench/queue.sh
# the regress and isolation suites under valgrind (not part of make test)
valgrind:
	bash test/valgrind/run.sh
# the call graph between the files of src/ and of cli/, from gcc's
# -fcallgraph-info; fails on a cycle (test/suites/layers.sh runs it under
# make test)
.PHONY: check-layers
check-layers:
	bash tools/layers.sh src cli
# formats src/ and cli/ as pgindent does (needs pg_bsd_indent: Debian package pg-bsd-indent)
.PHONY: indent
indent: all
	bash tools/indent.sh src/*.c src/*.h cli/*.c $(wildcard cli/*.h)
# dead rows of dlock_leases under CHURN_MINUTES (10) of churn, 1.0's table
# settings beside the current ones (bench/churn.sh); not part of make test
.PHONY: churn
churn: install
	bash bench/churn.sh
# the fuzz back to back with crashes, for SOAK_MINUTES (default 10); not part of make test
.PHONY: soak
soak:
	bash test/soak.sh
# dlock under Patroni and etcd through switchovers, crashes, freezes and
# network cuts, with synchronous_mode off and on (test/ha/run.sh, ~14 min, as
# root); not part of make test
.PHONY: ha
ha: install
	bash test/ha/run.sh

# The dlock command (cli/): built by make, installed next to PostgreSQL's
# binaries; WITH_CLI=no leaves it out (the Debian packages ship it in a
# package of its own, dlock-cli: see debian/rules).
WITH_CLI ?= yes
.PHONY: cli install-cli uninstall-cli clean-cli
ifeq ($(WITH_CLI),yes)
all: cli
install: install-cli
uninstall: uninstall-cli
endif
clean: clean-cli
cli:
	$(MAKE) -C cli PG_CONFIG=$(PG_CONFIG)
install-cli: cli
	$(MAKE) -C cli install PG_CONFIG=$(PG_CONFIG)
uninstall-cli:
	$(MAKE) -C cli uninstall PG_CONFIG=$(PG_CONFIG)
clean-cli:
	$(MAKE) -C cli clean

# Debian packages (tools/deb.sh), built from a copy of the checkout: on this
# machine into build/, or with PG_VERSIONS="15 17 18" in each version's Debian
# root (tools/root.sh) into build/pgNN/.  test-deb builds them in the root of
# each version of PG_VERSIONS (default 15), installs them with dpkg -i into a
# throwaway copy of that root and runs the demo there (test/deb.sh).  Both
# need root for the roots (chroot); not part of make test.
.PHONY: deb test-deb
deb:
	bash tools/deb.sh $(PG_VERSIONS)
test-deb:
	bash tools/deb.sh $(or $(PG_VERSIONS),15)
	bash test/deb.sh $(or $(PG_VERSIONS),15)
