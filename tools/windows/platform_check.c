/* Checks every hl_* call of _native/hl_platform.h on real loopback sockets, on POSIX and Windows.
 *
 *   Linux/macOS:  cc -Wall -I_native tools/windows/platform_check.c -o platform_check && ./platform_check
 *   Windows (cross, run with wine):
 *       x86_64-w64-mingw32-gcc -Wall -I_native tools/windows/platform_check.c -lws2_32 -o platform_check.exe
 *
 * With -DHL_CHECK_HIREDIS (and hiredis's headers and library) it also runs the engine's own
 * sequence on sockets made by hiredis: non-blocking connect, POLLOUT, SO_ERROR, a command written
 * by hiredis and its reply parsed, a refused connection seen as an error.
 * tools/windows_cross_check.sh builds and runs it both ways. Exits 1 if any check fails. */
#ifdef _WIN32
#ifndef _WIN32_WINNT
#define _WIN32_WINNT 0x0603 /* what Python.h asks for (Windows 8.1) */
#endif
#elif !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* as Python.h does on Linux: POLLRDHUP */
#endif

#ifdef HL_CHECK_HIREDIS
#include <hiredis/hiredis.h>
#endif
#include "hl_platform.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _WIN32
#include <ws2tcpip.h>
typedef int hl_socklen;
#define CLOSE_SOCKET closesocket
#define LAST_SOCKET_ERROR() WSAGetLastError()
#define CONNECT_IN_PROGRESS(e) ((e) == WSAEWOULDBLOCK)
#define ERR_CONNREFUSED WSAECONNREFUSED
#define ERR_CONNRESET WSAECONNRESET
static void sleep_ms(int ms) { Sleep((DWORD)ms); }
#else
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
typedef socklen_t hl_socklen;
#define INVALID_SOCKET (-1)
#define CLOSE_SOCKET close
#define LAST_SOCKET_ERROR() errno
#define CONNECT_IN_PROGRESS(e) ((e) == EINPROGRESS)
#define ERR_CONNREFUSED ECONNREFUSED
#define ERR_CONNRESET ECONNRESET
static void sleep_ms(int ms) { usleep((useconds_t)ms * 1000); }
#endif

static int failures = 0;
static int checks = 0;

#define CHECK(cond, ...)                                                                       \
    do {                                                                                       \
        checks++;                                                                              \
        if (cond) {                                                                            \
            printf("  ok    ");                                                                \
        } else {                                                                               \
            failures++;                                                                        \
            printf("  FAIL  ");                                                                \
        }                                                                                      \
        printf(__VA_ARGS__);                                                                   \
        printf("\n");                                                                          \
        fflush(stdout);                                                                        \
    } while (0)

static void fatal(const char *what) {
    printf("  FATAL %s (socket error %d)\n", what, LAST_SOCKET_ERROR());
    exit(2);
}

static void set_nonblocking(hl_socket s) {
#ifdef _WIN32
    u_long on = 1;
    if (ioctlsocket(s, FIONBIO, &on) != 0)
        fatal("ioctlsocket(FIONBIO)");
#else
    int flags = fcntl(s, F_GETFL);
    if (flags == -1 || fcntl(s, F_SETFL, flags | O_NONBLOCK) == -1)
        fatal("fcntl(O_NONBLOCK)");
#endif
}

static hl_socket tcp_socket(void) {
    hl_socket s = socket(AF_INET, SOCK_STREAM, IPPROTO_TCP);
    if (s == INVALID_SOCKET)
        fatal("socket()");
    return s;
}

/* A listening socket on 127.0.0.1, its port in *port. */
static hl_socket listener(int *port) {
    struct sockaddr_in addr;
    hl_socklen length = sizeof(addr);
    hl_socket s = tcp_socket();
    memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    if (bind(s, (struct sockaddr *)&addr, sizeof(addr)) != 0)
        fatal("bind()");
    if (listen(s, 8) != 0)
        fatal("listen()");
    if (getsockname(s, (struct sockaddr *)&addr, &length) != 0)
        fatal("getsockname()");
    *port = ntohs(addr.sin_port);
    return s;
}

/* Starts a non-blocking connect to 127.0.0.1:port; returns the socket. */
static hl_socket connect_nonblocking(int port, int *immediate) {
    struct sockaddr_in addr;
    hl_socket s = tcp_socket();
    set_nonblocking(s);
    memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons((unsigned short)port);
    if (connect(s, (struct sockaddr *)&addr, sizeof(addr)) == 0) {
        *immediate = 1;
    } else {
        int e = LAST_SOCKET_ERROR();
        if (!CONNECT_IN_PROGRESS(e) && e != ERR_CONNREFUSED)
            fatal("connect()");
        *immediate = 0;
    }
    return s;
}

/* hl_poll on one socket; returns revents (0 on timeout), -1 on a poll error. */
static int poll_one(hl_socket s, short events, int timeout_ms) {
    hl_pollfd fd;
    int rc;
    fd.fd = s;
    fd.events = events;
    fd.revents = 0;
    rc = hl_poll(&fd, 1, timeout_ms);
    if (rc < 0)
        return -1;
    return rc == 0 ? 0 : fd.revents;
}

/* Accepts with a deadline (the listener is blocking: poll first). */
static hl_socket accept_one(hl_socket l) {
    hl_socket s;
    if (poll_one(l, POLLIN, 5000) <= 0)
        fatal("no connection to accept within 5 s");
    s = accept(l, NULL, NULL);
    if (s == INVALID_SOCKET)
        fatal("accept()");
    return s;
}

static int recv_all(hl_socket s, char *buffer, int want, int timeout_ms) {
    int got = 0;
    int64_t deadline = hl_now_ns() + (int64_t)timeout_ms * 1000000;
    while (got < want && hl_now_ns() < deadline) {
        int n;
        if (poll_one(s, POLLIN, 100) <= 0)
            continue;
        n = (int)recv(s, buffer + got, want - got, 0);
        if (n <= 0)
            break;
        got += n;
    }
    return got;
}

static int inheritable(hl_socket s) {
#ifdef _WIN32
    DWORD flags = 0;
    if (!GetHandleInformation((HANDLE)s, &flags))
        return -1;
    return (flags & HANDLE_FLAG_INHERIT) != 0;
#else
    int flags = fcntl(s, F_GETFD);
    if (flags == -1)
        return -1;
    return (flags & FD_CLOEXEC) == 0;
#endif
}

static void make_inheritable(hl_socket s) {
#ifdef _WIN32
    SetHandleInformation((HANDLE)s, HANDLE_FLAG_INHERIT, HANDLE_FLAG_INHERIT);
#else
    int flags = fcntl(s, F_GETFD);
    if (flags != -1)
        fcntl(s, F_SETFD, flags & ~FD_CLOEXEC);
#endif
}

static void check_clock(void) {
    int64_t a, b, c;
    int i, monotonic = 1;
    printf("clock\n");
    a = hl_now_ns();
    for (i = 0; i < 100000; i++) {
        b = hl_now_ns();
        if (b < a)
            monotonic = 0;
        a = b;
    }
    CHECK(monotonic, "hl_now_ns() never goes back over 100000 calls");
    a = hl_now_ns();
    sleep_ms(50);
    b = hl_now_ns();
    CHECK(b - a >= 40000000 && b - a < 2000000000, "hl_now_ns() advances by ~50 ms over a 50 ms sleep (%.1f ms)",
          (double)(b - a) / 1e6);
    c = hl_now_ns();
    CHECK(a > 0 && c >= b, "hl_now_ns() is positive and monotonic (%lld ns)", (long long)c);
}

static void check_poll_interrupted(void) {
    printf("hl_poll_interrupted\n");
#ifdef _WIN32
    CHECK(hl_poll_interrupted() == 0, "hl_poll_interrupted() is 0 (WSAPoll is never interrupted)");
#else
    errno = EINTR;
    CHECK(hl_poll_interrupted() == 1, "hl_poll_interrupted() is 1 after EINTR");
    errno = EAGAIN;
    CHECK(hl_poll_interrupted() == 0, "hl_poll_interrupted() is 0 after EAGAIN");
#endif
}

static void check_connection(void) {
    int port, immediate, revents, i;
    long sent;
    char buffer[256];
    hl_socket l, c, s;
    int64_t t0, waited;

    printf("connection: connect, send, poll, peek\n");
    l = listener(&port);
    c = connect_nonblocking(port, &immediate);
    make_inheritable(c);
    CHECK(inheritable(c) == 1, "the client socket starts inheritable (test setup)");
    hl_set_noinherit(c);
    CHECK(inheritable(c) == 0, "hl_set_noinherit() makes it non-inheritable");

    revents = poll_one(c, POLLOUT, 5000);
    CHECK(revents > 0 && (revents & POLLOUT), "non-blocking connect: hl_poll reports POLLOUT (revents 0x%x)", revents);
    CHECK(hl_socket_error(c) == 0, "hl_socket_error() is 0 on the connected socket");
    s = accept_one(l);
    set_nonblocking(s);

    CHECK(hl_peer_closed(c) == 0, "hl_peer_closed() is 0 on an open, idle connection");
    t0 = hl_now_ns();
    revents = poll_one(c, POLLIN | HL_POLLRDHUP, 100);
    waited = hl_now_ns() - t0;
    CHECK(revents == 0, "hl_poll times out on an idle connection (revents 0x%x)", revents);
    CHECK(waited >= 80000000 && waited < 2000000000, "hl_poll's 100 ms timeout takes ~100 ms (%.1f ms)",
          (double)waited / 1e6);

    sent = hl_send(c, "*1\r\n$4\r\nPING\r\n", 14);
    CHECK(sent == 14, "hl_send() sends a whole small command (%ld)", sent);
    CHECK(recv_all(s, buffer, 14, 5000) == 14 && memcmp(buffer, "*1\r\n$4\r\nPING\r\n", 14) == 0,
          "the peer receives it");

    sent = hl_send(s, "+PONG\r\n", 7);
    CHECK(sent == 7, "hl_send() from the other side (%ld)", sent);
    revents = poll_one(c, POLLIN | HL_POLLRDHUP, 5000);
    CHECK(revents > 0 && (revents & POLLIN), "hl_poll reports POLLIN for the reply (revents 0x%x)", revents);
    CHECK(!(revents & (POLLERR | POLLHUP | POLLNVAL | HL_POLLRDHUP)), "and nothing else (revents 0x%x)", revents);
    CHECK(hl_peer_closed(c) == 0, "hl_peer_closed() is 0 with a reply waiting");
    CHECK(hl_peer_closed(c) == 0, "hl_peer_closed() again: MSG_PEEK consumed nothing");
    CHECK(recv_all(c, buffer, 7, 5000) == 7 && memcmp(buffer, "+PONG\r\n", 7) == 0,
          "the whole reply is still there to read after the peeks");
    CHECK(hl_peer_closed(c) == 0, "hl_peer_closed() is 0 after the reply was read");

    /* Fill the socket until hl_send() says it would block; the peer reads nothing meanwhile. */
    {
        static char chunk[65536];
        long total = 0;
        memset(chunk, 'x', sizeof(chunk));
        sent = 1;
        for (i = 0; i < 100000 && sent > 0; i++) {
            sent = hl_send(c, chunk, sizeof(chunk));
            if (sent > 0)
                total += sent;
        }
        CHECK(sent == 0, "hl_send() returns 0 (would block) once the socket is full, after %ld bytes", total);
        revents = poll_one(c, POLLOUT, 0);
        CHECK(revents == 0 || !(revents & POLLOUT), "hl_poll does not report POLLOUT on the full socket (revents 0x%x)", revents);
        /* Drain it: POLLOUT comes back. */
        {
            static char sink[65536];
            long drained = 0;
            int64_t deadline = hl_now_ns() + 10000000000LL;
            while (drained < total && hl_now_ns() < deadline) {
                int n;
                if (poll_one(s, POLLIN, 100) <= 0)
                    continue;
                n = (int)recv(s, sink, sizeof(sink), 0);
                if (n <= 0)
                    break;
                drained += n;
            }
            CHECK(drained == total, "the peer reads all %ld bytes", drained);
        }
        revents = poll_one(c, POLLOUT, 5000);
        CHECK(revents > 0 && (revents & POLLOUT), "hl_poll reports POLLOUT again once drained (revents 0x%x)", revents);
    }

    /* The peer closes: with a last reply in flight first, then nothing. */
    sent = hl_send(s, "+LATE\r\n", 7);
    CHECK(sent == 7, "the peer sends a late reply");
    CLOSE_SOCKET(s);
    sleep_ms(100);
    revents = poll_one(c, POLLIN | HL_POLLRDHUP, 5000);
    CHECK(revents > 0 && (revents & (POLLIN | POLLHUP | HL_POLLRDHUP)),
          "hl_poll reports the late reply and/or the close (revents 0x%x)", revents);
    if (HL_POLLRDHUP != 0)
        CHECK((revents & (HL_POLLRDHUP | POLLHUP)) != 0,
              "this OS has HL_POLLRDHUP: the close shows in the same hl_poll (revents 0x%x)", revents);
    CHECK(hl_peer_closed(c) == 0, "hl_peer_closed() is 0 while the late reply is unread (peek sees data)");
    CHECK(recv_all(c, buffer, 7, 5000) == 7 && memcmp(buffer, "+LATE\r\n", 7) == 0, "the late reply is read");
    revents = poll_one(c, POLLIN | HL_POLLRDHUP, 5000);
    CHECK(revents > 0 && (revents & (POLLIN | POLLHUP | HL_POLLRDHUP)), "hl_poll reports the close (revents 0x%x)",
          revents);
    CHECK(hl_peer_closed(c) == 1, "hl_peer_closed() is 1 once the peer has closed");
    CHECK(hl_peer_closed(c) == 1, "and stays 1");
    CHECK(hl_socket_error(c) == 0, "hl_socket_error() is 0 after an orderly close");
    CLOSE_SOCKET(c);
    CLOSE_SOCKET(l);
}

static void check_reset(void) {
    int port, immediate, revents, i, error = 0;
    long sent = 1;
    hl_socket l, c, s;
    struct linger hard = {1, 0};
    const char *text;

    printf("connection reset by the peer\n");
    l = listener(&port);
    c = connect_nonblocking(port, &immediate);
    if (poll_one(c, POLLOUT, 5000) <= 0)
        fatal("connect did not complete");
    s = accept_one(l);
    /* SO_LINGER {1, 0}: close() sends a RST. */
    if (setsockopt(s, SOL_SOCKET, SO_LINGER, (const char *)&hard, sizeof(hard)) != 0)
        fatal("setsockopt(SO_LINGER)");
    CLOSE_SOCKET(s);
    sleep_ms(100);
    revents = poll_one(c, POLLIN | HL_POLLRDHUP, 5000);
    CHECK(revents > 0 && (revents & (POLLIN | POLLHUP | POLLERR | HL_POLLRDHUP)),
          "hl_poll reports the reset (revents 0x%x)", revents);
    CHECK(hl_peer_closed(c) == 1, "hl_peer_closed() is 1 after a reset");
    for (i = 0; i < 10 && sent > 0; i++) {
        sent = hl_send(c, "*1\r\n$4\r\nPING\r\n", 14);
        if (sent < 0)
            error = hl_send_error();
        sleep_ms(20);
    }
    CHECK(sent == -1, "hl_send() fails (-1) on the reset connection, without killing the process");
    text = hl_error_text(error);
    CHECK(error != 0, "hl_send_error() says why: %d", error);
    CHECK(text != NULL && text[0] != '\0' && strncmp(text, "Unknown error", 13) != 0,
          "hl_error_text(%d) = \"%s\"", error, text ? text : "(null)");
    CLOSE_SOCKET(c);
    CLOSE_SOCKET(l);
}

static void check_refused(void) {
    int port, immediate, revents, error;
    hl_socket l, c;
    const char *text;

    printf("refused connection\n");
    l = listener(&port);
    CLOSE_SOCKET(l); /* nothing listens on that port now */
    c = connect_nonblocking(port, &immediate);
    revents = poll_one(c, POLLOUT, 5000);
    CHECK(revents > 0, "hl_poll reports the failed connect within 5 s (revents 0x%x)", revents);
    CHECK(revents > 0 && (revents & (POLLERR | POLLHUP | POLLOUT)), "as POLLERR/POLLHUP/POLLOUT (revents 0x%x)", revents);
    error = hl_socket_error(c);
    CHECK(error == ERR_CONNREFUSED, "hl_socket_error() is ECONNREFUSED/WSAECONNREFUSED (%d)", error);
    text = hl_error_text(error);
    CHECK(text != NULL && text[0] != '\0' && strncmp(text, "Unknown error", 13) != 0,
          "hl_error_text(%d) = \"%s\"", error, text ? text : "(null)");
    CLOSE_SOCKET(c);
}

#ifndef _WIN32
static volatile int child_hook_ran = 0;
static void child_hook(void) { child_hook_ran = 1; }
#endif

static void check_fork(void) {
    printf("hl_on_fork_in_child\n");
#ifdef _WIN32
    CHECK(hl_on_fork_in_child(NULL) == 0, "hl_on_fork_in_child() is a no-op returning 0 (no fork() on Windows)");
#else
    {
        int status = 0;
        pid_t pid;
        CHECK(hl_on_fork_in_child(child_hook) == 0, "hl_on_fork_in_child() registers a hook");
        fflush(stdout);
        pid = fork();
        if (pid == 0)
            _exit(child_hook_ran ? 0 : 3);
        CHECK(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "the hook runs in the child after fork()");
        CHECK(child_hook_ran == 0, "and not in the parent");
    }
#endif
}

static void check_error_text(void) {
    const char *text;
    printf("hl_error_text\n");
#ifdef _WIN32
    text = hl_error_text(WSAECONNRESET);
    CHECK(text != NULL && strstr(text, "Unknown error") == NULL && text[0] != '\0' && text[strlen(text) - 1] != '\n',
          "hl_error_text(WSAECONNRESET) = \"%s\"", text);
    text = hl_error_text(WSAEWOULDBLOCK);
    CHECK(text != NULL && text[0] != '\0', "hl_error_text(WSAEWOULDBLOCK) = \"%s\"", text);
    text = hl_error_text(0x7ffffff0);
    CHECK(text != NULL && text[0] != '\0', "hl_error_text(unknown code) = \"%s\"", text);
#else
    text = hl_error_text(ECONNRESET);
    CHECK(text != NULL && text[0] != '\0', "hl_error_text(ECONNRESET) = \"%s\"", text);
#endif
}

#ifdef HL_CHECK_HIREDIS
/* The engine's sequence on a hiredis-made socket (hl_context_fd: redisFD is a SOCKET on Windows). */
static void check_hiredis(void) {
    int port, revents, done = 0;
    char buffer[64];
    hl_socket l, s, fd;
    redisContext *ctx;
    void *reply = NULL;

    printf("hiredis %d.%d.%d non-blocking context\n", HIREDIS_MAJOR, HIREDIS_MINOR, HIREDIS_PATCH);
    l = listener(&port);
    ctx = redisConnectNonBlock("127.0.0.1", port);
    CHECK(ctx != NULL && ctx->err == 0, "redisConnectNonBlock() starts a connect (%s)", ctx ? ctx->errstr : "NULL");
    if (ctx == NULL || ctx->err)
        return;
    fd = hl_context_fd(ctx);
    CHECK(sizeof(ctx->fd) == sizeof(hl_socket) || sizeof(ctx->fd) == sizeof(int),
          "redisContext.fd is %d bytes, hl_socket %d", (int)sizeof(ctx->fd), (int)sizeof(hl_socket));
    hl_set_noinherit(fd);
    CHECK(inheritable(fd) == 0, "hl_set_noinherit() on hiredis's socket");
    revents = poll_one(fd, POLLOUT, 5000);
    CHECK(revents > 0 && (revents & POLLOUT) && hl_socket_error(fd) == 0, "hiredis's connect completes (revents 0x%x)",
          revents);
    s = accept_one(l);
    CHECK(redisAppendCommand(ctx, "PING") == REDIS_OK, "redisAppendCommand()");
    while (!done && redisBufferWrite(ctx, &done) == REDIS_OK && !done)
        poll_one(fd, POLLOUT, 100);
    CHECK(done, "redisBufferWrite() writes it");
    CHECK(recv_all(s, buffer, 14, 5000) == 14 && memcmp(buffer, "*1\r\n$4\r\nPING\r\n", 14) == 0,
          "the peer receives PING");
    send(s, "+PONG\r\n", 7, 0);
    revents = poll_one(fd, POLLIN | HL_POLLRDHUP, 5000);
    CHECK(revents > 0 && (revents & POLLIN), "hl_poll reports the reply (revents 0x%x)", revents);
    CHECK(redisBufferRead(ctx) == REDIS_OK && redisReaderGetReply(ctx->reader, &reply) == REDIS_OK && reply != NULL &&
              ((redisReply *)reply)->type == REDIS_REPLY_STATUS && strcmp(((redisReply *)reply)->str, "PONG") == 0,
          "hiredis parses +PONG");
    if (reply)
        freeReplyObject(reply);
    CLOSE_SOCKET(s);
    revents = poll_one(fd, POLLIN | HL_POLLRDHUP, 5000);
    CHECK(revents > 0 && hl_peer_closed(fd) == 1, "the close shows in hl_poll and hl_peer_closed() (revents 0x%x)", revents);
    redisFree(ctx);

    CLOSE_SOCKET(l); /* nothing listens on that port now */
    ctx = redisConnectNonBlock("127.0.0.1", port);
    if (ctx != NULL && ctx->err == 0) {
        int error;
        fd = hl_context_fd(ctx);
        revents = poll_one(fd, POLLOUT, 5000);
        error = hl_socket_error(fd);
        CHECK(revents > 0 && error != 0, "a refused hiredis connect: revents 0x%x, hl_socket_error %d (%s)", revents, error,
              hl_error_text(error));
    } else {
        CHECK(ctx != NULL, "a refused hiredis connect fails at once (%s)", ctx ? ctx->errstr : "NULL");
    }
    if (ctx)
        redisFree(ctx);
}
#endif

int main(void) {
#ifdef _WIN32
    WSADATA wsa;
    if (WSAStartup(MAKEWORD(2, 2), &wsa) != 0)
        fatal("WSAStartup()");
    printf("hl_platform.h check: Windows branch (_WIN32_WINNT 0x%04x, SOCKET %d bytes)\n", _WIN32_WINNT,
           (int)sizeof(SOCKET));
#else
    printf("hl_platform.h check: POSIX branch (HL_POLLRDHUP 0x%x)\n", (unsigned)HL_POLLRDHUP);
#ifndef MSG_NOSIGNAL
    signal(SIGPIPE, SIG_IGN); /* as Python does; where send() cannot be told (macOS) */
#endif
#endif
    check_clock();
    check_poll_interrupted();
    check_error_text();
    check_connection();
    check_reset();
    check_refused();
    check_fork();
#ifdef HL_CHECK_HIREDIS
    check_hiredis();
#endif
    printf("%d checks, %d failed\n", checks, failures);
#ifdef _WIN32
    WSACleanup();
#endif
    return failures == 0 ? 0 : 1;
}
