/// How much of the storage a request grew a connection keeps for the next one. Reading a target, a body or a line
/// into storage the connection keeps saves an allocation a request, but a large request would leave its size on
/// the connection until it closes: an idle keep-alive connection that once took a 60 KB body would hold 60 KB.
package enum KeptStorage {
    /// The most storage a connection keeps in one buffer between requests (a send is a few KB).
    package static let limit = 8 * 1024

    /// Lets `bytes`' storage go when a large request grew it past ``limit``; smaller storage is kept.
    @inline(__always)
    package static func releaseIfGrown(_ bytes: inout [UInt8]) {
        if bytes.capacity > limit { bytes = [] }
    }
}
