import Dispatch
import Glibc
public import Herald
import HeraldTesting
import Synchronization

/// What every fuzz target shares: a decoding context that gives the same result for the same input (a fixed
/// message ID and receipt time), and the ways an input is cut into the reads a socket would deliver.
public enum FuzzInput {
    /// Sender ID `1234567890`, message ID `0:1`, received at a fixed time: the decoders are deterministic on it.
    public static let decoding = DecodingContext(senderID: "1234567890", makeMessageID: { "0:1" }, now: { 1_700_000_000_000 })

    /// The input's bytes.
    public static func bytes(_ start: UnsafePointer<UInt8>, _ count: Int) -> [UInt8] {
        Array(UnsafeBufferPointer(start: start, count: count))
    }

    /// `bytes` without its first byte, cut into chunks whose sizes that first byte picks: its low four bits bound
    /// a chunk (1 to 16 bytes, or anything up to the whole input for 15), the rest seed the sizes. So the fuzzer
    /// reaches every way of splitting a request across reads by changing one byte.
    public static func chunked(_ bytes: [UInt8]) -> [[UInt8]] {
        guard let first = bytes.first else { return [] }
        let body = bytes.dropFirst()
        let bound = first & 0x0F == 0x0F ? max(body.count, 1) : Int(first & 0x0F) + 1
        var random = SplitMix64(seed: UInt64(first >> 4))
        var chunks: [[UInt8]] = []
        var index = body.startIndex
        while index < body.endIndex {
            let size = Int(random.next(below: UInt64(bound))) + 1
            let end = min(index + size, body.endIndex)
            chunks.append(Array(body[index..<end]))
            index = end
        }
        return chunks
    }
}

/// A plugin that takes every message and does nothing with it, so that the bus answers deliveries.
final class DiscardingHandler: MessageHandler, Sendable {
    func didReceive(_ message: RemoteMessage) async throws {}
}

/// Waits for `body` on the fuzzer's thread (a fuzz target's entry point is synchronous).
public func blocking<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) -> T {
    let result = Box<T>()
    let done = DispatchSemaphore(value: 0)
    Task {
        do {
            let value = try await body()
            result.value.withLock { $0 = .success(value) }
        } catch {
            result.value.withLock { $0 = .failure(error) }
        }
        done.signal()
    }
    done.wait()
    switch result.value.withLock({ $0 })! {
    case .success(let value): return value
    case .failure(let error): fatalError("fuzz harness: \(error)")
    }
}

private final class Box<T: Sendable>: Sendable {
    let value = Mutex<Result<T, any Error>?>(nil)
}

/// A Herald (in-memory store, a handler that takes every message) with one receiver listening on a Unix socket,
/// started once per fuzzing process; ``exchange(_:)`` sends an input to it on a new connection.
public final class SocketHarness: Sendable {
    public let herald: Herald
    public let address: SocketAddress
    /// The instance's registration token. It is new in every run, so seeds cannot name it: token messages in the
    /// seeds are answered UNREGISTERED by the bus, and topic and condition messages go all the way to the handler.
    public let token: String

    /// Starts `receiver` (made for the socket path) in a new Herald of project `demo`, sender `1234567890`.
    public init(_ makeReceiver: (SocketAddress) -> any Receiver) {
        let path = "/tmp/herald-fuzz-\(getpid()).sock"
        unlink(path)
        let address = SocketAddress.unix(path: path)
        var configuration = Herald.Configuration(senderID: "1234567890")
        configuration.projectID = "demo"
        let herald = Herald(configuration: configuration)
        try! herald.register(makeReceiver(address))
        try! herald.register(DiscardingHandler())
        self.herald = herald
        self.address = address
        token = blocking {
            try await herald.start()
            return try await herald.token()
        }
    }

    /// Connects, writes each chunk as its own read (waiting until the receiver has read one before writing the
    /// next, while it reads), half-closes and reads the answers until end of file. A receiver that does not end
    /// the connection within 20 s of the half-close is a hang: the process stops with the input.
    @discardableResult
    public func exchange(_ chunks: [[UInt8]]) -> [UInt8] {
        let client: TestSocketClient
        do {
            client = try TestSocketClient(address)
        } catch {
            fatalError("fuzz harness: cannot connect to \(address): \(error)")
        }
        for chunk in chunks {
            guard write(chunk, to: client.fd) else { break }
            waitUntilRead(client.fd)
        }
        client.halfClose()
        let answers = client.read { _ in false }
        guard client.readsClosed() else {
            fatalError("the receiver did not end the connection within 20 s of the client's half-close")
        }
        return answers
    }

    private func write(_ bytes: [UInt8], to fd: Int32) -> Bool {
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if written < 0, errno == EINTR { continue }
            guard written > 0 else { return false }
            offset += written
        }
        return true
    }

    /// Waits (at most about 50 ms: a receiver that paused reading never drains) until the peer has read all that
    /// was written: on a Unix stream socket SIOCOUTQ counts the bytes not yet read by the peer.
    private func waitUntilRead(_ fd: Int32) {
        for _ in 0..<1000 {
            var unread: Int32 = 0
            guard ioctl(fd, UInt(TIOCOUTQ), &unread) == 0, unread > 0 else { return }
            usleep(50)
        }
    }
}

/// libFuzzer's driver, for an entry point of our own (see ``fuzzerMain(_:_:_:)``).
@_silgen_name("LLVMFuzzerRunDriver")
private func LLVMFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<CInt>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> CInt
) -> CInt

/// Runs libFuzzer on `target` with the process's arguments. SwiftPM links a debug build's executable with
/// `--defsym main=<Module>_main` (so that tests can link executables), which takes the place of libFuzzer's own
/// `main`: each target therefore defines `<Module>_main` calling this. A release build links libFuzzer's `main`
/// and never calls it.
public func fuzzerMain(
    _ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>,
    _ target: @convention(c) (UnsafePointer<UInt8>, Int) -> CInt
) -> CInt {
    var argc = argc
    var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = argv
    return LLVMFuzzerRunDriver(&argc, &argv, target)
}
