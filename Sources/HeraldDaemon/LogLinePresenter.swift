import Herald
import HeraldEventLoop
import Logging

/// `--presenter log` (the default): each notification as one line in the daemon's log, the line the bus writes
/// when no presenter is registered (`notification` with the message ID, title, body and presentation options, at
/// level info, from the source `Herald`), so that the log reads as it always has.
///
/// It writes the line through the daemon's log handler without the metadata dictionary a log statement builds, which
/// was the largest cost of a notification's way through `herald serve` after decoding; with another handler it logs
/// through the logger as the bus does. A synchronous presenter: with no asynchronous notification handler or
/// presenter beside it, the bus presents inside the delivery, without a task. Its lines are gathered on the loop and
/// written together before the loop next polls (``LogOutput``): one `write(2)` for the notifications of a turn.
final class LogLinePresenter: SynchronousPresenter {
    /// The daemon's handler, in a class of its own so that a line borrows it where it is instead of copying the
    /// handler (and retaining what it holds) for each notification.
    private final class Line: Sendable {
        let handler: LiveLevelLogHandler
        init(_ handler: LiveLevelLogHandler) { self.handler = handler }
    }

    private let logger: Logger
    private let line: Line?
    private let loop: EventLoop

    /// A presenter logging through `logger` for an instance running on `loop`.
    init(logger: Logger, loop: EventLoop) {
        self.logger = logger
        self.loop = loop
        line = (logger.handler as? LiveLevelLogHandler).map(Line.init)
    }

    var descriptor: PluginDescriptor { PluginDescriptor(name: "log", summary: "a log line per notification") }

    func show(_ message: RemoteMessage, options: PresentationOptions, actions: [NotificationAction]) {
        // The handler's level read where it is: through `Optional.map` its closure copied the handler (and retained
        // what it holds) for every notification.
        guard let line else {
            guard logger.logLevel <= .info else { return }
            let (title, body) = message.alertTitleAndBody
            logger.info(
                "notification",
                metadata: [
                    "message_id": .string(message.messageID ?? ""), "title": .string(title ?? ""), "body": .string(body ?? ""),
                    "options": .string(options.description),
                ],
                source: "Herald")
            return
        }
        guard line.handler.logLevel <= .info else { return }
        let (title, body) = message.alertTitleAndBody
        let (messageID, shown) = (message.messageID ?? "", options.description)
        // In key order, as the handler writes a statement's metadata.
        line.handler.log(.info, "notification", source: "Herald", gatheringOn: loop) { field in
            field("body", body ?? "")
            field("message_id", messageID)
            field("options", shown)
            field("title", title ?? "")
        }
    }
}
