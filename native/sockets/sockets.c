// Datagram sockets of any family for JavaScript, as a Node-API addon that uses no libuv handle, so it loads in
// any runtime that implements Node-API (Node, Bun). Each socket has a thread of its own that blocks in poll() on
// the socket and on an eventfd (written by close), and hands each received datagram to JavaScript through a
// thread-safe function; sends are plain synchronous sendto() calls from JavaScript. Protocols (netlink messages,
// ICMP packets, frames) are built and read in TypeScript: src/net/sockets.ts wraps this file.
//
//   open(family, type, protocol, onReceive(error, data, source)): handle
//       socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, protocol); the process is not kept alive by it until
//       ref(handle, true). onReceive gets (null, datagram, source sockaddr) per datagram in the kernel's order, or
//       (error) when a receive fails (the socket's pending error, e.g. netlink's ENOBUFS); the socket stays open.
//   bind(handle, sockaddr: Buffer)
//   setOption(handle, level, name, value: number | Buffer)          setsockopt(); a number is passed as an int;
//       for SO_ATTACH_FILTER the Buffer is the program (struct sock_filter instructions), wrapped here
//   send(handle, data: Buffer, to: string | Buffer)                  a numeric IP (IPv6 with %zone) or a sockaddr
//   ref(handle, keepAlive: boolean)
//   close(handle)       idempotent; the thread has ended when it returns; a collected handle is closed too
//   openStream(family): fd       a TCP socket (non-blocking, close-on-exec) with no thread, for options Node's net
//       module cannot set before connect() or listen() (TCP_MD5SIG); net.Socket / net.Server then adopt the fd.
//       bind and setOption take such an fd in place of a handle; closeStream(fd) closes one never adopted.
// Errors are thrown (or passed) as Error objects whose `code` is the errno name (EPERM, EBUSY, …) and `errno` the
// negative errno, as Node's own errors.
//
// The thread reads what the socket holds (a batch of up to 128 KiB) into the socket's buffer and waits until
// JavaScript has copied it: one thread switch per burst, not per datagram, and datagrams wait in the kernel's
// receive buffer (whose overflow the kernel reports), not in an unbounded queue of ours.
// Built at `npm ci` by node-gyp (install script of native/sockets/package.json).
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <linux/filter.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <node_api.h>

// Netlink dumps come in datagrams of up to 32 KiB; IP datagrams and frames are smaller than this. Each read
// offers a datagram this much room, so none is ever cut short.
#define DATAGRAM_ROOM 65536
// What the thread reads before handing over: a burst (a dump's datagrams) crosses to JavaScript at once, not
// one thread switch per datagram.
#define BATCH_BYTES (2 * DATAGRAM_ROOM)
#define BATCH_DATAGRAMS 64
// poll() and recvfrom() need little stack: keep each thread's mapping small.
#define THREAD_STACK_SIZE (256 * 1024)
#define THREAD_NAME "ccm-socket"

typedef struct {
  size_t offset;
  size_t length;
  socklen_t source_length;
  struct sockaddr_storage source;
} Datagram;

typedef struct {
  int fd;
  int wake;  // eventfd: close() writes it to end the thread's poll()
  bool thread_started;
  pthread_t thread;
  napi_threadsafe_function deliver;
  // Main thread only. `self` (the JavaScript handle) is held strongly while the socket keeps the process alive:
  // a socket that does must not be closed by the garbage collector, however unreachable its handle.
  napi_ref self;
  bool kept_alive;
  bool closed;  // a delivery still queued then is dropped
  // The hand-over of a batch from the thread to JavaScript, guarded by `lock`.
  pthread_mutex_t lock;
  pthread_cond_t taken;
  bool pending;
  bool stopping;
  // The batch: datagrams in the order read, then the receive error that ended it (0: none).
  size_t count;
  Datagram datagrams[BATCH_DATAGRAMS];
  int error;
  // The JavaScript handle and the thread-safe function each own the socket; the last to finish frees it.
  int owners;
  unsigned char buffer[BATCH_BYTES];
} Socket;

static Socket *unwrap(napi_env env, napi_value value);

#define CHECK(env, call)                                                 \
  do {                                                                   \
    if ((call) != napi_ok) {                                             \
      napi_throw_error((env), NULL, "sockets addon: " #call " failed"); \
      return NULL;                                                       \
    }                                                                    \
  } while (0)

static napi_value errno_error(napi_env env, const char *syscall, int err) {
  const char *name = strerrorname_np(err);
  if (!name) name = "EUNKNOWN";
  char message[160];
  snprintf(message, sizeof message, "%s %s: %s", syscall, name, strerror(err));
  napi_value code, text, error, number;
  napi_create_string_utf8(env, name, NAPI_AUTO_LENGTH, &code);
  napi_create_string_utf8(env, message, NAPI_AUTO_LENGTH, &text);
  napi_create_error(env, code, text, &error);
  napi_create_int32(env, -err, &number);
  napi_set_named_property(env, error, "errno", number);
  return error;
}

static napi_value throw_errno(napi_env env, const char *syscall, int err) {
  napi_throw(env, errno_error(env, syscall, err));
  return NULL;
}

static void drop_owner(Socket *sock) {
  if (--sock->owners > 0) return;
  pthread_mutex_destroy(&sock->lock);
  pthread_cond_destroy(&sock->taken);
  munmap(sock, sizeof *sock);
}

// Waits until JavaScript has taken what the thread holds; false when the thread is to end instead.
static bool hand_over(Socket *sock) {
  pthread_mutex_lock(&sock->lock);
  sock->pending = true;
  pthread_mutex_unlock(&sock->lock);
  if (napi_call_threadsafe_function(sock->deliver, NULL, napi_tsfn_nonblocking) != napi_ok) return false;
  pthread_mutex_lock(&sock->lock);
  while (sock->pending && !sock->stopping) pthread_cond_wait(&sock->taken, &sock->lock);
  bool go_on = !sock->stopping;
  pthread_mutex_unlock(&sock->lock);
  return go_on;
}

// An entry on the socket's error queue (IP_RECVERR) keeps POLLERR raised after recvfrom() has reported its
// error: take it off, or poll() would wake the thread again and again.
static void discard_queued_error(int fd) {
  char control[512];
  struct msghdr message = {.msg_control = control, .msg_controllen = sizeof control};
  recvmsg(fd, &message, MSG_ERRQUEUE | MSG_DONTWAIT);
}

// Reads datagrams until the socket has no more, the batch is full, or a receive error (which ends the batch).
static void read_batch(Socket *sock, bool error_queued) {
  size_t used = 0;
  sock->count = 0;
  sock->error = 0;
  while (sock->count < BATCH_DATAGRAMS && BATCH_BYTES - used >= DATAGRAM_ROOM) {
    Datagram *datagram = &sock->datagrams[sock->count];
    datagram->source_length = sizeof datagram->source;
    // MSG_TRUNC: the datagram's real length, so an oversized one is an error rather than silently cut.
    ssize_t length = recvfrom(sock->fd, sock->buffer + used, DATAGRAM_ROOM, MSG_DONTWAIT | MSG_TRUNC,
                              (struct sockaddr *)&datagram->source, &datagram->source_length);
    if (length < 0 && errno == EINTR) continue;
    if (length < 0 && errno == EAGAIN) {
      if (error_queued && sock->count == 0) discard_queued_error(sock->fd);
      return;
    }
    sock->error = length < 0 ? errno : length > DATAGRAM_ROOM ? EMSGSIZE : 0;
    if (sock->error) return;
    datagram->offset = used;
    datagram->length = (size_t)length;
    used += (size_t)length;
    sock->count++;
  }
}

static void *receive_loop(void *data) {
  Socket *sock = data;
  struct pollfd fds[2] = {{.fd = sock->fd, .events = POLLIN}, {.fd = sock->wake, .events = POLLIN}};
  for (;;) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      sock->count = 0;
      sock->error = errno;
    } else if (fds[1].revents) {
      return NULL;
    } else {
      read_batch(sock, fds[0].revents & POLLERR);
    }
    if ((sock->count || sock->error) && !hand_over(sock)) return NULL;
  }
}

// What onReceive throws is uncaught, as from any callback (the runtime would only warn of it otherwise).
static void call_receiver(napi_env env, napi_value callback, napi_value argv[3]) {
  napi_value receiver, exception;
  napi_get_undefined(env, &receiver);
  if (napi_call_function(env, receiver, callback, 3, argv, NULL) != napi_pending_exception) return;
  napi_get_and_clear_last_exception(env, &exception);
  napi_fatal_exception(env, exception);
}

// On the main thread: the batch, to onReceive, one call per datagram and one for an error.
static void call_js(napi_env env, napi_value callback, void *context, void *data) {
  (void)data;
  Socket *sock = context;
  if (env == NULL || sock->closed) return;  // torn down, or closed: close() has already released the thread
  napi_handle_scope scope;
  if (napi_open_handle_scope(env, &scope) != napi_ok) return;
  // Copied first, then the thread released to read on.
  size_t count = sock->count;
  napi_value received[BATCH_DATAGRAMS + 1][3];
  for (size_t i = 0; i < count; i++) {
    Datagram *datagram = &sock->datagrams[i];
    napi_get_null(env, &received[i][0]);
    napi_create_buffer_copy(env, datagram->length, sock->buffer + datagram->offset, NULL, &received[i][1]);
    napi_create_buffer_copy(env, datagram->source_length, &datagram->source, NULL, &received[i][2]);
  }
  if (sock->error) {
    received[count][0] = errno_error(env, "recvfrom", sock->error);
    napi_get_undefined(env, &received[count][1]);
    received[count][2] = received[count][1];
    count++;
  }
  pthread_mutex_lock(&sock->lock);
  sock->pending = false;
  pthread_cond_signal(&sock->taken);
  pthread_mutex_unlock(&sock->lock);
  // onReceive may close the socket: what follows in the batch is then dropped, as a closed socket receives
  // nothing. Owned meanwhile, so that it outlives a close.
  sock->owners++;
  for (size_t i = 0; i < count && !sock->closed; i++) call_receiver(env, callback, received[i]);
  drop_owner(sock);
  napi_close_handle_scope(env, scope);
}

// Ends the thread (joined: it is gone when this returns) and closes the descriptors.
static void stop(Socket *sock) {
  if (sock->fd < 0) return;
  if (sock->thread_started) {
    pthread_mutex_lock(&sock->lock);
    sock->stopping = true;
    pthread_cond_signal(&sock->taken);
    pthread_mutex_unlock(&sock->lock);
    uint64_t one = 1;
    while (write(sock->wake, &one, sizeof one) < 0 && errno == EINTR) {
    }
    pthread_join(sock->thread, NULL);
  }
  close(sock->fd);
  close(sock->wake);
  sock->fd = -1;
}

static void close_socket(napi_env env, Socket *sock) {
  if (sock->closed) return;
  sock->closed = true;
  if (sock->self) napi_delete_reference(env, sock->self);
  sock->self = NULL;
  stop(sock);
  napi_release_threadsafe_function(sock->deliver, napi_tsfn_abort);
}

// The thread-safe function is gone: released by close(), or the environment torn down with the socket open.
static void finalize_deliver(napi_env env, void *data, void *hint) {
  (void)env;
  (void)hint;
  Socket *sock = data;
  sock->closed = true;
  stop(sock);
  drop_owner(sock);
}

static void finalize_handle(napi_env env, void *data, void *hint) {
  (void)hint;
  close_socket(env, data);
  drop_owner(data);
}

// A handle's descriptor, or a stream socket's descriptor given as a number (openStream); -1 after throwing.
static int descriptor(napi_env env, napi_value value) {
  napi_valuetype type;
  int32_t fd;
  if (napi_typeof(env, value, &type) == napi_ok && type == napi_number) {
    if (napi_get_value_int32(env, value, &fd) != napi_ok || fd < 0) {
      throw_errno(env, "socket", EBADF);
      return -1;
    }
    return fd;
  }
  Socket *sock = unwrap(env, value);
  return sock ? sock->fd : -1;
}

static Socket *unwrap(napi_env env, napi_value value) {
  Socket *sock = NULL;
  if (napi_get_value_external(env, value, (void **)&sock) != napi_ok) {
    napi_throw_type_error(env, NULL, "sockets addon: not a socket handle");
    return NULL;
  }
  if (sock->closed) {
    throw_errno(env, "socket", EBADF);
    return NULL;
  }
  return sock;
}

// The descriptors and the lock; nothing yet that needs undoing beyond closing and unmapping.
static Socket *new_socket(int family, int type, int protocol, int *err) {
  // Mapped, not allocated: the batch buffer's pages cost memory only once a burst fills them, and go back to the
  // system at close (malloc would zero them all, and might keep them).
  Socket *sock = mmap(NULL, sizeof *sock, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (sock == MAP_FAILED) {
    *err = errno;
    return NULL;
  }
  sock->wake = eventfd(0, EFD_CLOEXEC);
  sock->fd = sock->wake < 0 ? -1 : socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, protocol);
  if (sock->fd < 0) {
    *err = errno;
    if (sock->wake >= 0) close(sock->wake);
    munmap(sock, sizeof *sock);
    return NULL;
  }
  pthread_mutex_init(&sock->lock, NULL);
  pthread_cond_init(&sock->taken, NULL);
  return sock;
}

static int start_thread(Socket *sock) {
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setstacksize(&attributes, THREAD_STACK_SIZE);
  int err = pthread_create(&sock->thread, &attributes, receive_loop, sock);
  pthread_attr_destroy(&attributes);
  sock->thread_started = err == 0;
  // Named here, not by the thread, so that /proc/<pid>/task shows it (and tests count it) once open() returns.
  if (sock->thread_started) pthread_setname_np(sock->thread, THREAD_NAME);
  return err;
}

static napi_value Open(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4], name, result;
  int32_t family, type, protocol;
  CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  CHECK(env, napi_get_value_int32(env, argv[0], &family));
  CHECK(env, napi_get_value_int32(env, argv[1], &type));
  CHECK(env, napi_get_value_int32(env, argv[2], &protocol));
  int err = 0;
  Socket *sock = new_socket(family, type, protocol, &err);
  if (!sock) return throw_errno(env, "socket", err);
  sock->owners = 1;  // the thread-safe function's, from its creation on
  if (napi_create_string_utf8(env, "Socket", NAPI_AUTO_LENGTH, &name) != napi_ok ||
      napi_create_threadsafe_function(env, argv[3], NULL, name, 0, 1, sock, finalize_deliver, sock, call_js,
                                      &sock->deliver) != napi_ok) {
    stop(sock);
    drop_owner(sock);
    napi_throw_error(env, NULL, "sockets addon: cannot create the delivery function");
    return NULL;
  }
  // Sockets do not keep the process alive unless asked (ref): an idle one must not.
  napi_unref_threadsafe_function(env, sock->deliver);
  err = start_thread(sock);
  if (err) {
    close_socket(env, sock);
    return throw_errno(env, "pthread_create", err);
  }
  sock->owners++;  // the handle's
  if (napi_create_external(env, sock, finalize_handle, NULL, &result) != napi_ok ||
      napi_create_reference(env, result, 0, &sock->self) != napi_ok) {
    close_socket(env, sock);
    drop_owner(sock);
    napi_throw_error(env, NULL, "sockets addon: cannot create the socket handle");
    return NULL;
  }
  return result;
}

static napi_value Bind(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  void *address;
  size_t length;
  CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  int fd = descriptor(env, argv[0]);
  if (fd < 0) return NULL;
  CHECK(env, napi_get_buffer_info(env, argv[1], &address, &length));
  if (bind(fd, address, (socklen_t)length) < 0) return throw_errno(env, "bind", errno);
  return NULL;
}

static napi_value SetOption(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  int32_t level, name, number;
  napi_valuetype type;
  void *value = &number;
  size_t length = sizeof number;
  CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  int fd = descriptor(env, argv[0]);
  if (fd < 0) return NULL;
  CHECK(env, napi_get_value_int32(env, argv[1], &level));
  CHECK(env, napi_get_value_int32(env, argv[2], &name));
  CHECK(env, napi_typeof(env, argv[3], &type));
  if (type == napi_number)
    CHECK(env, napi_get_value_int32(env, argv[3], &number));
  else
    CHECK(env, napi_get_buffer_info(env, argv[3], &value, &length));
  // The one option whose value holds a pointer: struct sock_fprog, to the program (the kernel copies it).
  struct sock_fprog filter;
  if (level == SOL_SOCKET && name == SO_ATTACH_FILTER && type != napi_number) {
    size_t count = length / sizeof(struct sock_filter);
    if (count == 0 || count > USHRT_MAX || length % sizeof(struct sock_filter) != 0)
      return throw_errno(env, "setsockopt", EINVAL);
    filter = (struct sock_fprog){.len = (unsigned short)count, .filter = value};
    value = &filter;
    length = sizeof filter;
  }
  if (setsockopt(fd, level, name, value, (socklen_t)length) < 0) return throw_errno(env, "setsockopt", errno);
  return NULL;
}

static napi_value Send(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  void *data, *address;
  size_t length, address_length;
  napi_valuetype type;
  CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  Socket *sock = unwrap(env, argv[0]);
  if (!sock) return NULL;
  CHECK(env, napi_get_buffer_info(env, argv[1], &data, &length));
  CHECK(env, napi_typeof(env, argv[2], &type));
  struct addrinfo *target = NULL;
  if (type == napi_string) {
    char text[INET6_ADDRSTRLEN + IF_NAMESIZE + 2];
    CHECK(env, napi_get_value_string_utf8(env, argv[2], text, sizeof text, NULL));
    // Numeric only: parses the address (and an IPv6 %zone) without any name lookup.
    struct addrinfo hints = {.ai_flags = AI_NUMERICHOST};
    if (getaddrinfo(text, NULL, &hints, &target) != 0) return throw_errno(env, "getaddrinfo", EINVAL);
    address = target->ai_addr;
    address_length = target->ai_addrlen;
  } else {
    CHECK(env, napi_get_buffer_info(env, argv[2], &address, &address_length));
  }
  ssize_t sent = sendto(sock->fd, data, length, 0, address, (socklen_t)address_length);
  int err = errno;
  if (target) freeaddrinfo(target);
  if (sent < 0) return throw_errno(env, "sendto", err);
  return NULL;
}

static napi_value Ref(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  bool keep_alive;
  CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  Socket *sock = unwrap(env, argv[0]);
  if (!sock) return NULL;
  CHECK(env, napi_get_value_bool(env, argv[1], &keep_alive));
  if (keep_alive == sock->kept_alive) return NULL;
  uint32_t count;
  CHECK(env, keep_alive ? napi_reference_ref(env, sock->self, &count) : napi_reference_unref(env, sock->self, &count));
  CHECK(env, keep_alive ? napi_ref_threadsafe_function(env, sock->deliver)
                        : napi_unref_threadsafe_function(env, sock->deliver));
  sock->kept_alive = keep_alive;
  return NULL;
}

static napi_value Close(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  Socket *sock = NULL;
  CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  if (napi_get_value_external(env, argv[0], (void **)&sock) != napi_ok) {
    napi_throw_type_error(env, NULL, "sockets addon: not a socket handle");
    return NULL;
  }
  close_socket(env, sock);
  return NULL;
}

static napi_value OpenStream(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1], result;
  int32_t family;
  CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  CHECK(env, napi_get_value_int32(env, argv[0], &family));
  int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP);
  if (fd < 0) return throw_errno(env, "socket", errno);
  if (napi_create_int32(env, fd, &result) != napi_ok) {
    close(fd);
    napi_throw_error(env, NULL, "sockets addon: cannot return the descriptor");
    return NULL;
  }
  return result;
}

static napi_value CloseStream(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  int32_t fd;
  CHECK(env, napi_get_cb_info(env, info, &argc, argv, NULL, NULL));
  CHECK(env, napi_get_value_int32(env, argv[0], &fd));
  if (close(fd) < 0) return throw_errno(env, "close", errno);
  return NULL;
}

NAPI_MODULE_INIT() {
  napi_property_descriptor functions[] = {
      {"open", NULL, Open, NULL, NULL, NULL, napi_enumerable, NULL},
      {"bind", NULL, Bind, NULL, NULL, NULL, napi_enumerable, NULL},
      {"setOption", NULL, SetOption, NULL, NULL, NULL, napi_enumerable, NULL},
      {"send", NULL, Send, NULL, NULL, NULL, napi_enumerable, NULL},
      {"ref", NULL, Ref, NULL, NULL, NULL, napi_enumerable, NULL},
      {"close", NULL, Close, NULL, NULL, NULL, napi_enumerable, NULL},
      {"openStream", NULL, OpenStream, NULL, NULL, NULL, napi_enumerable, NULL},
      {"closeStream", NULL, CloseStream, NULL, NULL, NULL, napi_enumerable, NULL},
  };
  CHECK(env, napi_define_properties(env, exports, sizeof functions / sizeof functions[0], functions));
  return exports;
}
