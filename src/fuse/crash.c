// SPDX-License-Identifier: GPL-2.0
/*
 * Once daemonized, stderr is /dev/null and a crash left nothing behind but
 * ENOTCONN on the mount (seen once in 14 benchmark runs).  The handlers
 * here write what they can: syslog is not async-signal-safe, but the
 * process is dying either way and the message is worth the risk; the
 * backtrace goes to stderr (the foreground log) with backtrace_symbols_fd,
 * which does not allocate.  Then the default action runs, so the exit
 * status and the core dump are the signal's.
 *
 * Not under the sanitizers: their own handlers report better.
 */
#include "crash.h"
#include "log.h"

#include <execinfo.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define CRASH_SANITIZED 1
#else
#define CRASH_SANITIZED 0
#endif

#define CRASH_FRAMES 48

static const int fatal[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT };

static void on_fatal(int sig)
{
	void *frames[CRASH_FRAMES];
	int n = backtrace(frames, CRASH_FRAMES);
	static const char head[] = "rrfuse: fatal signal, backtrace:\n";

	rr_log(LOG_CRIT, "fatal signal %d (%s): the daemon stops; the mount answers ENOTCONN "
	       "until rrfuse -u, and the next mount or e2fsck finishes the image", sig, strsignal(sig));
	if (write(STDERR_FILENO, head, sizeof(head) - 1) > 0)
		backtrace_symbols_fd(frames, n, STDERR_FILENO);
	signal(sig, SIG_DFL);
	raise(sig);
}

void rr_crash_handlers(void)
{
	struct sigaction sa;
	struct rlimit rl;
	void *warm[1];
	size_t i;

	if (CRASH_SANITIZED)
		return;
	/* A core file, as large as the hard limit lets it be. */
	if (!getrlimit(RLIMIT_CORE, &rl) && rl.rlim_cur != rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_CORE, &rl);
	}
	/* backtrace() loads libgcc on first use: not in a signal handler. */
	backtrace(warm, 1);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_fatal;
	sa.sa_flags = SA_RESETHAND | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	for (i = 0; i < sizeof(fatal) / sizeof(fatal[0]); i++)
		sigaction(fatal[i], &sa, NULL);
}
