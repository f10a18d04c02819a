/* The few operating-system calls the engine makes, each behind one name, for POSIX and Windows.
 * engine.pyx declares these (and nothing else of the OS), so porting means editing this file. */
#ifndef HIREDLOCK_PLATFORM_H
#define HIREDLOCK_PLATFORM_H

/* Every module compiled against the engine's .pxd includes this header (to know its types),
 * most of them without calling these functions: no warning for those left unused there. */
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wunused-variable"
#endif

#include <limits.h>
#include <stdint.h>
#include <string.h>

#ifdef _WIN32
/* WSAPoll() and WSAPOLLFD need Windows Vista (0x0600) or later; Python.h asks for 8 or later, and
 * must come first (it does in the Cython-generated C). */
#if defined(_WIN32_WINNT) && _WIN32_WINNT < 0x0600
#error "hl_platform.h needs _WIN32_WINNT >= 0x0600 (WSAPoll)"
#endif
#include <stdio.h>
#include <winsock2.h>
#include <windows.h>

/* A socket is a SOCKET (a 64-bit handle on Win64), which is also what hiredis 1.x's redisFD is
 * there. The engine's sockets are non-blocking (hiredis's non-blocking connect makes them so):
 * hl_peer_closed() relies on that, Windows has no MSG_DONTWAIT. */
typedef SOCKET hl_socket;
typedef WSAPOLLFD hl_pollfd;

static int hl_poll(hl_pollfd *fds, unsigned long count, int timeout_ms) {
    return WSAPoll(fds, (ULONG)count, timeout_ms);
}

/* WSAPoll is never interrupted by a signal: the engine polls in slices and runs Python's
 * signal handlers (Ctrl-C) between them. */
static int hl_poll_interrupted(void) { return 0; }

static int64_t hl_now_ns(void) {
    LARGE_INTEGER frequency, counter;
    QueryPerformanceFrequency(&frequency);
    QueryPerformanceCounter(&counter);
    /* split to keep the product within 64 bits */
    return (int64_t)(counter.QuadPart / frequency.QuadPart) * 1000000000
        + (int64_t)(counter.QuadPart % frequency.QuadPart) * 1000000000 / frequency.QuadPart;
}

static int hl_socket_error(hl_socket fd) {
    int error = 0;
    int length = sizeof(error);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, (char *)&error, &length) != 0)
        return WSAGetLastError();
    return error;
}

/* Child processes must not inherit the lock's connections (Python's own sockets are not
 * inheritable either, PEP 446). */
static void hl_set_noinherit(hl_socket fd) {
    SetHandleInformation((HANDLE)fd, HANDLE_FLAG_INHERIT, 0);
}

/* Sends what the socket takes now: the count sent, 0 when it would block, -1 on an error
 * (hl_send_error() says which). */
static long hl_send(hl_socket fd, const char *data, size_t length) {
    int sent = send(fd, data, length > INT_MAX ? INT_MAX : (int)length, 0);
    if (sent == SOCKET_ERROR)
        return WSAGetLastError() == WSAEWOULDBLOCK ? 0 : -1;
    return sent;
}

static int hl_send_error(void) { return WSAGetLastError(); }

/* Whether the peer has closed the connection (or it failed), without consuming anything. */
static int hl_peer_closed(hl_socket fd) {
    char byte;
    int got = recv(fd, &byte, 1, MSG_PEEK);
    return got == 0 || (got == SOCKET_ERROR && WSAGetLastError() != WSAEWOULDBLOCK);
}

/* There is no fork() on Windows: nothing to watch for. */
static int hl_on_fork_in_child(void (*child)(void)) {
    (void)child;
    return 0;
}

/* The errors the engine reports are Winsock codes (WSAGetLastError(), SO_ERROR), which the C
 * runtime's strerror() does not know ("Unknown error"): the system's message instead (English
 * where installed), in a buffer of the calling thread, without the trailing period and newline. */
#ifdef _MSC_VER
#define HL_THREAD_LOCAL __declspec(thread)
#else
#define HL_THREAD_LOCAL __thread /* MinGW's gcc ignores __declspec(thread) */
#endif
static const char *hl_error_text(int error) {
    static HL_THREAD_LOCAL char text[256];
    const DWORD flags = FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS;
    DWORD length = FormatMessageA(flags, NULL, (DWORD)error, MAKELANGID(LANG_ENGLISH, SUBLANG_ENGLISH_US),
                                  text, (DWORD)sizeof(text), NULL);
    if (length == 0)
        length = FormatMessageA(flags, NULL, (DWORD)error, 0, text, (DWORD)sizeof(text), NULL);
    if (length == 0) {
        snprintf(text, sizeof(text), "Windows error %d", error);
        return text;
    }
    while (length > 0 && strchr("\r\n .", text[length - 1]) != NULL)
        text[--length] = '\0';
    return text;
}

#else
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <time.h>

typedef struct pollfd hl_pollfd;

static int hl_poll(hl_pollfd *fds, unsigned long count, int timeout_ms) {
    return poll(fds, (nfds_t)count, timeout_ms);
}

/* A signal handler ran: the engine runs Python's signal handlers before polling again. */
static int hl_poll_interrupted(void) { return errno == EINTR; }

static int64_t hl_now_ns(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

static int hl_socket_error(int fd) {
    int error = 0;
    socklen_t length = sizeof(error);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0)
        return errno;
    return error;
}

/* Sends what the socket takes now: the count sent, 0 when it would block, -1 on an error
 * (hl_send_error() says which). No SIGPIPE where the OS lets a call say so (Python ignores
 * SIGPIPE anyway). */
static long hl_send(int fd, const char *data, size_t length) {
#ifdef MSG_NOSIGNAL
    const int flags = MSG_NOSIGNAL;
#else
    const int flags = 0;
#endif
    ssize_t sent;
    do {
        sent = send(fd, data, length, flags);
    } while (sent < 0 && errno == EINTR);
    if (sent < 0)
        return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
    return (long)sent;
}

static int hl_send_error(void) { return errno; }

/* Whether the peer has closed the connection (or it failed), without consuming anything. */
static int hl_peer_closed(int fd) {
    char byte;
    ssize_t got = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static int hl_on_fork_in_child(void (*child)(void)) {
    return pthread_atfork(NULL, NULL, child);
}

/* Child processes must not inherit the lock's connections (Python's own sockets are not
 * inheritable either, PEP 446). */
static void hl_set_noinherit(int fd) {
    int flags = fcntl(fd, F_GETFD);
    if (flags != -1)
        fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
}
#endif

/* poll() flag for "the peer closed its side" where the OS has one (Linux): a connection whose
 * last replies and end of stream arrived together shows it in the same poll() call. Elsewhere 0,
 * and the engine asks hl_peer_closed() instead. */
#ifdef POLLRDHUP
#define HL_POLLRDHUP POLLRDHUP
#else
#define HL_POLLRDHUP 0
#endif

#ifndef _WIN32
static const char *hl_error_text(int error) { return strerror(error); }
#endif

/* Whether an error code (errno, or hl_send_error()'s) says that the peer reset the connection
 * (or that writes are refused after a reset). */
#include <errno.h>
#ifdef _WIN32
static int hl_is_reset(int error) {
    return error == ECONNRESET || error == EPIPE || error == WSAECONNRESET;
}
#else
static int hl_is_reset(int error) { return error == ECONNRESET || error == EPIPE; }
#endif

/* The engine's socket type (SOCKET on Windows, above), and a hiredis context's socket as one:
 * redisContext.fd is a redisFD (SOCKET on Windows) in hiredis 1.x and an int in 0.14. */
#ifndef _WIN32
typedef int hl_socket;
#endif
#define hl_context_fd(ctx) ((hl_socket)(ctx)->fd)

#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

#endif
