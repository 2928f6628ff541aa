import Herald
import Logging

/// `--presenter log` (the default): each notification as one line in the daemon's log, the line the bus writes
/// when no presenter is registered (`notification` with the message ID, title, body and presentation options, at
/// level info, from the source `Herald`), so that the log reads as it always has.
///
/// It writes the line through the daemon's log handler without the metadata dictionary a log statement builds, which
/// was the largest cost of a notification's way through `herald serve` after decoding; with another handler it logs
/// through the logger as the bus does. A synchronous presenter: with no asynchronous notification handler or
/// presenter beside it, the bus presents inside the delivery, without a task.
final class LogLinePresenter: SynchronousPresenter {
    private let logger: Logger
    private let handler: LiveLevelLogHandler?

    init(logger: Logger) {
        self.logger = logger
        handler = logger.handler as? LiveLevelLogHandler
    }

    var descriptor: PluginDescriptor { PluginDescriptor(name: "log", summary: "a log line per notification") }

    func show(_ message: RemoteMessage, options: PresentationOptions, actions: [NotificationAction]) {
        guard logger.logLevel <= .info else { return }
        let (title, body) = message.alertTitleAndBody
        let (messageID, shown) = (message.messageID ?? "", options.description)
        guard let handler else {
            logger.info(
                "notification",
                metadata: [
                    "message_id": .string(messageID), "title": .string(title ?? ""), "body": .string(body ?? ""), "options": .string(shown),
                ],
                source: "Herald")
            return
        }
        // In key order, as the handler writes a statement's metadata.
        handler.log(
            .info, "notification", entries: ["body": body ?? "", "message_id": messageID, "options": shown, "title": title ?? ""],
            source: "Herald")
    }
}
