// Minimal TCP listener for ninfer-serve (POSIX sockets or Winsock).
#ifndef NINFER_NET_H
#define NINFER_NET_H

#include <string>

namespace ninfer {

class Listener {
public:
    Listener() = default;
    Listener(const Listener &) = delete;
    Listener &operator=(const Listener &) = delete;
    ~Listener();

    // Resolves host (numeric or name), binds host:port and listens. No
    // SO_REUSEADDR: a port that another socket holds is reported as a failure.
    bool bind_and_listen(const std::string &host, int port);

private:
    long long fd_ = -1;
    bool wsa_started_ = false;
};

}  // namespace ninfer

#endif  // NINFER_NET_H
