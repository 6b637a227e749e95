// SPDX-License-Identifier: GPL-2.0
/*
 * rrunlink [-w WORKERS] [-t SECONDS] DIR
 *
 * The workload of stress-ng's "unlink" stressor, which came after the
 * stress-ng that Debian 12 ships (0.15.06): each worker has its own
 * directory and four processes that share 1024 file names in it.  A round
 * opens every name read-write (creating it, with one of O_EXCL, O_DIRECT,
 * O_DSYNC, O_NOATIME, O_SYNC, O_TRUNC or nothing, chosen at random), makes
 * every eighth name a hard link of the one before, fsyncs every 64th,
 * closes one file in eight, unlinks every name and closes the rest: most
 * files are unlinked while open, so each goes through the orphan list.
 *
 * Prints the rounds of each worker's first process per second, stress-ng's
 * bogo ops/s for that stressor, on one line:
 *   rrunlink: W workers, R rounds in S s, X rounds/s
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROCS 4
#define FILES 1024

static struct timespec deadline;	/* set before any fork: every process sees it */

static int done(void)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec > deadline.tv_sec ||
	       (now.tv_sec == deadline.tv_sec && now.tv_nsec >= deadline.tv_nsec);
}

static void shuffle(unsigned int *idx, unsigned int *seed)
{
	unsigned int i;

	for (i = 0; i < FILES; i++) {
		unsigned int j = (unsigned int)rand_r(seed) % FILES, t = idx[i];

		idx[i] = idx[j];
		idx[j] = t;
	}
}

static void one_process(char names[FILES][64], unsigned long *rounds)
{
	static const int flags[] = { O_EXCL, O_DIRECT, O_DSYNC, O_NOATIME, O_SYNC, O_TRUNC, 0 };
	unsigned int idx[FILES], i, seed = (unsigned int)getpid();
	int fds[FILES];

	for (i = 0; i < FILES; i++)
		idx[i] = i;
	shuffle(idx, &seed);
	while (!done()) {
		for (i = 0; i < FILES; i++)
			fds[i] = -1;
		for (i = 0; !done() && i < FILES; i++) {
			int tries = 0;

			if ((i & 7) == 7 && link(names[i - 1], names[i]) == 0) {
				fds[i] = open(names[i], O_RDWR);
				if (fds[i] >= 0)
					continue;
			}
			do {
				int f = flags[(unsigned int)rand_r(&seed) % (sizeof(flags) / sizeof(flags[0]))];

				fds[i] = open(names[i], O_CREAT | O_RDWR | f, 0600);
				if (fds[i] < 0 && errno == EEXIST)
					fds[i] = open(names[i], O_RDWR);
			} while (fds[i] < 0 && errno == EINVAL && ++tries < 5);
			if (fds[i] >= 0 && (i & 63) == 0)
				fsync(fds[i]);
		}
		for (i = 0; i < FILES; i += 8) {
			if (fds[idx[i]] >= 0) {
				close(fds[idx[i]]);
				fds[idx[i]] = -1;
			}
		}
		for (i = 0; i < FILES; i++)
			unlink(names[idx[i]]);
		shuffle(idx, &seed);
		for (i = 0; i < FILES; i++)
			if (fds[idx[i]] >= 0)
				close(fds[idx[i]]);
		if (!done())
			(*rounds)++;
	}
	for (i = 0; i < FILES; i++)
		unlink(names[i]);
}

static int worker(const char *top, int w, unsigned long *rounds)
{
	static char names[FILES][64];
	char dir[4096];
	pid_t kids[PROCS - 1];
	unsigned long dummy = 0;
	int i;

	snprintf(dir, sizeof(dir), "%s/rrunlink.%d.%d", top, (int)getppid(), w);
	if (mkdir(dir, 0700) && errno != EEXIST) {
		perror(dir);
		return 1;
	}
	if (chdir(dir)) {
		perror(dir);
		return 1;
	}
	for (i = 0; i < FILES; i++)
		snprintf(names[i], sizeof(names[i]), "f%c%c-%04x", 'a' + i % 26, 'a' + (i / 26) % 26, i);
	for (i = 0; i < PROCS - 1; i++) {
		kids[i] = fork();
		if (kids[i] == 0) {
			one_process(names, &dummy);
			_exit(0);
		}
	}
	one_process(names, rounds);
	for (i = 0; i < PROCS - 1; i++)
		if (kids[i] > 0)
			waitpid(kids[i], NULL, 0);
	if (chdir("..") == 0)
		rmdir(strrchr(dir, '/') + 1);
	return 0;
}

int main(int argc, char **argv)
{
	unsigned long *rounds, total = 0;
	int workers = 2, secs = 20, opt, i, rc = 0;
	struct timespec t0, t1;
	double el;
	pid_t *pids;

	while ((opt = getopt(argc, argv, "w:t:")) != -1) {
		if (opt == 'w')
			workers = atoi(optarg);
		else if (opt == 't')
			secs = atoi(optarg);
		else
			return 2;
	}
	if (optind != argc - 1 || workers < 1 || secs < 1) {
		fprintf(stderr, "usage: rrunlink [-w WORKERS] [-t SECONDS] DIR\n");
		return 2;
	}
	rounds = mmap(NULL, sizeof(*rounds) * (size_t)workers, PROT_READ | PROT_WRITE,
		      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pids = calloc((size_t)workers, sizeof(*pids));
	if (rounds == MAP_FAILED || !pids)
		return 1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	deadline = t0;
	deadline.tv_sec += secs;
	for (i = 0; i < workers; i++) {
		pids[i] = fork();
		if (pids[i] == 0)
			_exit(worker(argv[optind], i, &rounds[i]));
	}
	for (i = 0; i < workers; i++) {
		int st;

		if (pids[i] < 0 || waitpid(pids[i], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
			rc = 1;
		total += rounds[i];
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	el = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
	printf("rrunlink: %d workers, %lu rounds in %.2f s, %.2f rounds/s\n", workers, total, el,
	       (double)total / el);
	free(pids);
	munmap(rounds, sizeof(*rounds) * (size_t)workers);
	return rc;
}
