import CNATS
import Herald
import Logging

/// A cnats pointer carried into an offloaded or loop closure; cnats objects are safe to use from any thread.
struct UnsafeHandle: @unchecked Sendable {
    let pointer: OpaquePointer
    init(_ pointer: OpaquePointer) { self.pointer = pointer }
}

/// A raw pointer (a retained relay) carried out of an offloaded closure.
struct UnsafeRawHandle: @unchecked Sendable {
    let pointer: UnsafeMutableRawPointer
    init(_ pointer: UnsafeMutableRawPointer) { self.pointer = pointer }
}

/// The receiver side of one subscription: what its messages are (for ``NATSReceiver/handle(_:kind:acks:)``). Its
/// subscription is synchronous and drained on the loop after each read (`herald_nats_loop_add`), which holds it as an
/// unretained pointer; the receiver retains it from then until it removes the subscription.
final class SubscriptionRelay: @unchecked Sendable {
    // @unchecked Sendable: `receiver` and `kind` are set in init and never changed; `acks` is set before the
    // subscription is registered with the loop, which is the only place that reads it afterwards.
    /// Stored messages, core messages (topics), or a gateway's topic management requests (`NATSTopicRequest`).
    enum Kind { case jetStream, core, topicRequest }
    private weak var receiver: NATSReceiver?
    let kind: Kind
    /// The acks of the subscription's consumer when it acknowledges cumulatively; set before the first delivery.
    var acks: CumulativeAcks?

    init(receiver: NATSReceiver, kind: Kind) {
        self.receiver = receiver
        self.kind = kind
    }

    static func from(_ closure: UnsafeMutableRawPointer?) -> SubscriptionRelay {
        Unmanaged<SubscriptionRelay>.fromOpaque(closure!).takeUnretainedValue()
    }

    /// A message taken from the subscription on the loop thread; takes ownership of it.
    func deliver(_ message: OpaquePointer?) {
        guard let message else { return }
        guard let receiver else {
            herald_nats_message_free(message)
            return
        }
        receiver.handle(message, kind: kind, acks: acks)
    }
}

/// The receiver side of the connection's callbacks (disconnected, reconnected, closed, asynchronous errors), which
/// cnats runs on a thread of its own. Retained until the closed callback.
final class ConnectionRelay: @unchecked Sendable {
    // @unchecked Sendable: `receiver` is set in init and never changed; weak references are thread-safe.
    private weak var receiver: NATSReceiver?
    private let logger: Logger
    private let bus: MessageBus
    private let loop: EventLoop

    init(receiver: NATSReceiver, logger: Logger, bus: MessageBus, loop: EventLoop) {
        self.receiver = receiver
        self.logger = logger
        self.bus = bus
        self.loop = loop
    }

    static func from(_ closure: UnsafeMutableRawPointer?) -> ConnectionRelay {
        Unmanaged<ConnectionRelay>.fromOpaque(closure!).takeUnretainedValue()
    }

    func disconnected() { receiver?.connectionChanged(.reconnecting, logger: logger, bus: bus, loop: loop) }

    func reconnected(_ connection: OpaquePointer?) {
        var url: String?
        if let connection {
            var buffer = [CChar](repeating: 0, count: 256)
            if natsConnection_GetConnectedUrl(connection, &buffer, buffer.count) == NATS_OK {
                url = NATSConnectionSettings.redacted(
                    String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
            }
        }
        receiver?.connectionChanged(.connected, url: url, logger: logger, bus: bus, loop: loop)
    }

    func closed() {
        receiver?.connectionChanged(.closed, logger: logger, bus: bus, loop: loop)
        Unmanaged.passUnretained(self).release()
    }

    func asyncError(_ status: natsStatus) {
        logger.warning("NATS reported an error", metadata: ["error": "\(String(cString: natsStatus_GetText(status)))"])
    }
}
