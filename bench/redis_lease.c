/*
 * redis_lease.c
 *		Closed-loop Redis lease load: SET key owner NX PX 30000, then a Lua
 *		compare-and-delete, per cycle.
 *
 * Each client has its own connection and keeps exactly one request in
 * flight (no pipelining): send SET NX PX; if the reply is OK, send
 * EVAL <compare-and-delete> 1 key owner and count a cycle when it returns
 * 1; if the SET reply is nil (someone else holds the key) count a failed
 * try and start over.  Clients are spread over -j threads, each thread
 * multiplexing its connections with poll(), like pgbench -j.
 *
 * usage: redis_lease -h host -p port -c clients -j threads -T seconds
 *                    [-k keys] [-K fixed_key] [-S]
 *   -k  keys are "k<random 1..keys>" (default 100000)
 *   -K  every try targets this one key (hot key)
 *   -S  use EVALSHA of the pre-loaded script instead of EVAL
 * Output: one line of key=value pairs.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

static const char *release_lua =
"if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end";

static const char *host = "127.0.0.1";
static int	port = 6379;
static int	nclients = 1;
static int	nthreads = 1;
static double seconds = 10;
static long nkeys = 100000;
static const char *fixed_key = NULL;
static int	use_sha = 0;
static char sha[64];

static pthread_barrier_t barrier;
static double start_time;
static double end_time;

typedef struct Client
{
	redisContext *ctx;
	int			id;
	int			state;			/* 0 = SET sent, 1 = release sent, -1 = done */
	char		key[64];
	char		owner[32];
	uint64_t	rng;
} Client;

typedef struct Thread
{
	pthread_t	tid;
	int			first;
	int			count;
	Client	   *clients;
	long		tries;
	long		grants;
	long		cycles;
	long		bad_releases;
	long		errors;
} Thread;

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t
next_rand(uint64_t *s)
{
	/* xorshift64* */
	*s ^= *s >> 12;
	*s ^= *s << 25;
	*s ^= *s >> 27;
	return *s * 2685821657736338717ULL;
}

static void
flush_out(Client *c)
{
	int			done = 0;

	while (!done)
		if (redisBufferWrite(c->ctx, &done) != REDIS_OK)
		{
			fprintf(stderr, "redis_lease: write: %s\n", c->ctx->errstr);
			exit(1);
		}
}

static void
send_set(Client *c)
{
	if (fixed_key)
		snprintf(c->key, sizeof(c->key), "%s", fixed_key);
	else
		snprintf(c->key, sizeof(c->key), "k%ld", (long) (next_rand(&c->rng) % nkeys) + 1);
	redisAppendCommand(c->ctx, "SET %s %s NX PX 30000", c->key, c->owner);
	flush_out(c);
	c->state = 0;
}

static void
send_release(Client *c)
{
	if (use_sha)
		redisAppendCommand(c->ctx, "EVALSHA %s 1 %s %s", sha, c->key, c->owner);
	else
		redisAppendCommand(c->ctx, "EVAL %s 1 %s %s", release_lua, c->key, c->owner);
	flush_out(c);
	c->state = 1;
}

static void *
thread_main(void *arg)
{
	Thread	   *t = arg;
	struct pollfd *pfd = calloc(t->count, sizeof(struct pollfd));
	int			active = t->count;

	for (int i = 0; i < t->count; i++)
	{
		Client	   *c = &t->clients[i];
		struct timeval tv = {5, 0};

		c->ctx = redisConnectWithTimeout(host, port, tv);
		if (c->ctx == NULL || c->ctx->err)
		{
			fprintf(stderr, "redis_lease: connect: %s\n", c->ctx ? c->ctx->errstr : "?");
			exit(1);
		}
		snprintf(c->owner, sizeof(c->owner), "o%d", c->id);
		c->rng = 0x9E3779B97F4A7C15ULL * (uint64_t) (c->id + 1) ^ (uint64_t) getpid();
		if (c->rng == 0)
			c->rng = 1;
	}
	pthread_barrier_wait(&barrier);
	for (int i = 0; i < t->count; i++)
		send_set(&t->clients[i]);

	while (active > 0)
	{
		for (int i = 0; i < t->count; i++)
		{
			pfd[i].fd = t->clients[i].ctx->fd;
			pfd[i].events = t->clients[i].state >= 0 ? POLLIN : 0;
			pfd[i].revents = 0;
		}
		if (poll(pfd, t->count, 10000) <= 0)
		{
			fprintf(stderr, "redis_lease: poll: %s\n", errno ? strerror(errno) : "timeout");
			exit(1);
		}
		for (int i = 0; i < t->count; i++)
		{
			Client	   *c = &t->clients[i];
			redisReply *r;
			void	   *rp;

			if (c->state < 0 || !(pfd[i].revents & (POLLIN | POLLERR | POLLHUP)))
				continue;
			if (redisBufferRead(c->ctx) != REDIS_OK)
			{
				fprintf(stderr, "redis_lease: read: %s\n", c->ctx->errstr);
				exit(1);
			}
			while (c->state >= 0)
			{
				int			in_window;

				if (redisGetReplyFromReader(c->ctx, &rp) != REDIS_OK)
				{
					fprintf(stderr, "redis_lease: reply: %s\n", c->ctx->errstr);
					exit(1);
				}
				if (rp == NULL)
					break;
				r = rp;
				in_window = now_s() < end_time;
				if (r->type == REDIS_REPLY_ERROR)
				{
					fprintf(stderr, "redis_lease: server error: %s\n", r->str);
					t->errors++;
					exit(1);
				}
				if (c->state == 0)
				{
					int			ok = r->type == REDIS_REPLY_STATUS && strcmp(r->str, "OK") == 0;

					if (in_window)
					{
						t->tries++;
						t->grants += ok;
					}
					freeReplyObject(r);
					if (ok)
						send_release(c);	/* always release what we got */
					else if (in_window)
						send_set(c);
					else
					{
						c->state = -1;
						active--;
					}
				}
				else
				{
					int			deleted = r->type == REDIS_REPLY_INTEGER && r->integer == 1;

					if (in_window)
					{
						t->cycles += deleted;
						t->bad_releases += !deleted;
					}
					freeReplyObject(r);
					if (in_window)
						send_set(c);
					else
					{
						c->state = -1;
						active--;
					}
				}
			}
		}
	}
	for (int i = 0; i < t->count; i++)
		redisFree(t->clients[i].ctx);
	free(pfd);
	return NULL;
}

int
main(int argc, char **argv)
{
	int			opt;
	Thread	   *threads;
	Client	   *clients;
	long		tries = 0,
				grants = 0,
				cycles = 0,
				bad = 0;
	double		elapsed;

	while ((opt = getopt(argc, argv, "h:p:c:j:T:k:K:S")) != -1)
	{
		switch (opt)
		{
			case 'h':
				host = optarg;
				break;
			case 'p':
				port = atoi(optarg);
				break;
			case 'c':
				nclients = atoi(optarg);
				break;
			case 'j':
				nthreads = atoi(optarg);
				break;
			case 'T':
				seconds = atof(optarg);
				break;
			case 'k':
				nkeys = atol(optarg);
				break;
			case 'K':
				fixed_key = optarg;
				break;
			case 'S':
				use_sha = 1;
				break;
			default:
				fprintf(stderr, "usage: %s -h host -p port -c clients -j threads -T seconds [-k keys] [-K key] [-S]\n", argv[0]);
				return 2;
		}
	}
	if (nclients < 1 || nthreads < 1 || seconds <= 0 || nkeys < 1)
	{
		fprintf(stderr, "redis_lease: bad arguments\n");
		return 2;
	}
	if (nthreads > nclients)
		nthreads = nclients;

	if (use_sha)
	{
		struct timeval tv = {5, 0};
		redisContext *c = redisConnectWithTimeout(host, port, tv);
		redisReply *r;

		if (c == NULL || c->err)
		{
			fprintf(stderr, "redis_lease: connect failed\n");
			return 1;
		}
		r = redisCommand(c, "SCRIPT LOAD %s", release_lua);
		if (r == NULL || r->type != REDIS_REPLY_STRING)
		{
			fprintf(stderr, "redis_lease: SCRIPT LOAD failed\n");
			return 1;
		}
		snprintf(sha, sizeof(sha), "%s", r->str);
		freeReplyObject(r);
		redisFree(c);
	}

	clients = calloc(nclients, sizeof(Client));
	threads = calloc(nthreads, sizeof(Thread));
	pthread_barrier_init(&barrier, NULL, nthreads + 1);
	for (int i = 0, first = 0; i < nthreads; i++)
	{
		Thread	   *t = &threads[i];

		t->first = first;
		t->count = nclients / nthreads + (i < nclients % nthreads);
		t->clients = &clients[first];
		for (int k = 0; k < t->count; k++)
			clients[first + k].id = first + k + 1;
		first += t->count;
		pthread_create(&t->tid, NULL, thread_main, t);
	}
	/* all connected: start the clock, then let the threads go */
	start_time = now_s();
	end_time = start_time + seconds;
	pthread_barrier_wait(&barrier);
	for (int i = 0; i < nthreads; i++)
	{
		pthread_join(threads[i].tid, NULL);
		tries += threads[i].tries;
		grants += threads[i].grants;
		cycles += threads[i].cycles;
		bad += threads[i].bad_releases;
	}
	elapsed = seconds;
	printf("clients=%d threads=%d seconds=%.3f tries=%ld grants=%ld cycles=%ld "
		   "failed_releases=%ld tries_per_s=%.1f grants_per_s=%.1f cycles_per_s=%.1f release=%s\n",
		   nclients, nthreads, elapsed, tries, grants, cycles, bad,
		   tries / elapsed, grants / elapsed, cycles / elapsed,
		   use_sha ? "EVALSHA" : "EVAL");
	return 0;
}
