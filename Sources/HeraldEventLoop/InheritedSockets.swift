import Glibc

/// Listening sockets the service manager opened for the process before it started (systemd socket activation):
/// offered here once at start, each is then taken by the ``StreamServer`` asked to listen on its address, instead
/// of that server binding a socket of its own.
///
/// So a daemon started by a `.socket` unit keeps the connections clients made while it was starting or
/// restarting (the kernel queued them on the socket systemd holds), and may listen on a privileged port without
/// the privilege. A server takes the inherited socket whose local address is exactly the one it was asked for
/// (the same host as written, the same port; for a Unix socket the same path). A Unix socket taken this way is
/// not removed when the server closes: its file belongs to the service manager.
public enum InheritedSockets {
    private static let offered = Locked<[(descriptor: Int32, address: SocketAddress)]>([])

    /// Records listening socket `descriptor` for the server that will listen on its address; returns that address,
    /// or `nil` when the descriptor is not a listening stream socket on TCP or a Unix path (it is then left alone).
    @discardableResult
    public static func offer(_ descriptor: Int32) -> SocketAddress? {
        guard let address = listeningAddress(of: descriptor) else { return nil }
        offered.withLock { $0.append((descriptor, address)) }
        return address
    }

    /// Closes the sockets no server took, returning their addresses (for a warning: a socket unit and a
    /// configuration that disagree).
    public static func closeUntaken() -> [SocketAddress] {
        let left = offered.withLock { list in
            defer { list.removeAll() }
            return list
        }
        for socket in left { Glibc.close(socket.descriptor) }
        return left.map(\.address)
    }

    /// The offered socket listening on exactly `address`, removed from the offer; `nil` when there is none.
    static func take(_ address: SocketAddress) -> Int32? {
        offered.withLock { list in
            guard let index = list.firstIndex(where: { $0.address == address }) else { return nil }
            return list.remove(at: index).descriptor
        }
    }

    /// The local address of `descriptor` when it is a listening stream socket, TCP or Unix.
    static func listeningAddress(of descriptor: Int32) -> SocketAddress? {
        var type: Int32 = 0
        var listening: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(descriptor, SOL_SOCKET, SO_TYPE, &type, &length) == 0, type == Int32(SOCK_STREAM.rawValue) else { return nil }
        length = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(descriptor, SOL_SOCKET, SO_ACCEPTCONN, &listening, &length) == 0, listening != 0 else { return nil }
        var storage = sockaddr_storage()
        var size = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let named = withUnsafeMutableBytes(of: &storage) {
            getsockname(descriptor, $0.baseAddress!.assumingMemoryBound(to: sockaddr.self), &size)
        }
        guard named == 0 else { return nil }
        if Int32(storage.ss_family) == AF_UNIX {
            let path = withUnsafeBytes(of: &storage) { bytes -> String in
                let pathBytes = bytes.dropFirst(MemoryLayout<sa_family_t>.size).prefix(Int(size) - MemoryLayout<sa_family_t>.size)
                return String(decoding: pathBytes.prefix { $0 != 0 }, as: UTF8.self)
            }
            return path.isEmpty ? nil : .unix(path: path)
        }
        return SocketAddress.fromStorage(&storage)
    }
}
