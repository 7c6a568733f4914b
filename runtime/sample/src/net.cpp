#include "net.h"

#include <string>

#ifdef _WIN32
#include <winsock2.h>
#include <ws2tcpip.h>
#else
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>
#endif

namespace ninfer {

namespace {

#ifdef _WIN32
using socket_t = SOCKET;
constexpr socket_t kInvalid = INVALID_SOCKET;
void close_socket(socket_t s) { closesocket(s); }
#else
using socket_t = int;
constexpr socket_t kInvalid = -1;
void close_socket(socket_t s) { close(s); }
#endif

}  // namespace

Listener::~Listener()
{
    if (fd_ != -1) {
        close_socket(static_cast<socket_t>(fd_));
    }
#ifdef _WIN32
    if (wsa_started_) {
        WSACleanup();
    }
#endif
}

bool Listener::bind_and_listen(const std::string &host, int port)
{
#ifdef _WIN32
    if (!wsa_started_) {
        WSADATA data;
        if (WSAStartup(MAKEWORD(2, 2), &data) != 0) {
            return false;
        }
        wsa_started_ = true;
    }
#endif
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_protocol = IPPROTO_TCP;
    hints.ai_flags = AI_PASSIVE;
    addrinfo *found = nullptr;
    const std::string service = std::to_string(port);
    if (getaddrinfo(host.c_str(), service.c_str(), &hints, &found) != 0 || found == nullptr) {
        return false;
    }
    bool ok = false;
    for (addrinfo *ai = found; ai != nullptr && !ok; ai = ai->ai_next) {
        const socket_t s = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
        if (s == kInvalid) {
            continue;
        }
        if (bind(s, ai->ai_addr, static_cast<int>(ai->ai_addrlen)) == 0 && listen(s, 16) == 0) {
            fd_ = static_cast<long long>(s);
            ok = true;
        } else {
            close_socket(s);
        }
    }
    freeaddrinfo(found);
    return ok;
}

}  // namespace ninfer
