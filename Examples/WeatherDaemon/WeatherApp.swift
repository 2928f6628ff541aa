import Herald
import Logging

/// The weather app's delegate: keeps the forecast cache fresh on silent pushes, says how to present weather
/// notifications, presents them (a log line: a Linux daemon has no notification centre), and acts on responses.
final class WeatherApp: NotificationHandler, BackgroundFetchWorker, TokenHandler, Presenter, Sendable {
    /// The topic every instance subscribes to at start.
    static let topic = "weather"
    /// Severe-weather warnings: a banner with a sound.
    static let severeWeather = NotificationCategory(
        identifier: "SEVERE_WEATHER",
        actions: [
            NotificationAction(identifier: "SEE_FORECAST", title: "See the forecast", options: .foreground),
            NotificationAction(identifier: "SHARE_WARNING", title: "Share the warning"),
        ])
    /// Everyday forecast notifications: quietly into the list.
    static let forecast = NotificationCategory(
        identifier: "FORECAST",
        actions: [
            NotificationAction(identifier: "SEE_FORECAST", title: "See the forecast", options: .foreground)
        ])

    let cache: ForecastCache
    let logger: Logger

    init(cache: ForecastCache, logger: Logger) {
        self.cache = cache
        var logger = logger
        logger[metadataKey: "plugin"] = "weather"
        self.logger = logger
    }

    var descriptor: PluginDescriptor {
        PluginDescriptor(name: "weather", summary: "keeps the forecast cache fresh and presents weather notifications")
    }

    /// Subscribes to ``topic`` as the instance starts (before any message flows, so no message to the topic is
    /// missed); doing it at every start is harmless.
    func start(_ context: PluginContext) async throws {
        try await context.topics.subscribe(Self.topic)
        logger.notice("subscribed", metadata: ["topic": "\(Self.topic)", "cache": "\(cache.path)"])
    }

    // MARK: NotificationHandler

    /// Severe weather interrupts (banner and sound); everything else goes quietly into the list.
    func willPresent(_ message: RemoteMessage) async -> PresentationOptions {
        message.aps.category == Self.severeWeather.identifier ? [.banner, .sound] : [.list]
    }

    func didReceive(_ response: NotificationResponse) async {
        var metadata: Logger.Metadata = ["message_id": "\(response.message.messageID ?? "-")", "action": "\(response.actionIdentifier)"]
        if response.actionIdentifier == "SEE_FORECAST" {
            metadata["forecast"] = "\(cache.contents().map { String(decoding: $0, as: UTF8.self) } ?? "(none yet)")"
        }
        logger.info("notification response", metadata: metadata)
    }

    // MARK: Presenter

    func present(_ message: RemoteMessage, options: PresentationOptions, actions: [NotificationAction]) async {
        let alert = message.aps.alert
        logger.notice(
            "presenting",
            metadata: [
                "message_id": "\(message.messageID ?? "-")",
                "title": "\(alert?.title ?? "")",
                "body": "\(alert?.body ?? "")",
                "category": "\(message.aps.category ?? "-")",
                "options": "\(options)",
                "actions": "\(actions.map(\.identifier).joined(separator: ","))",
            ])
    }

    // MARK: BackgroundFetchWorker

    /// Writes the forecast the silent message carries to the cache: `.newData` when it changed, `.noData` when the
    /// cache holds it already (or the message carries none), `.failed` when the cache cannot be written.
    func fetch(_ message: RemoteMessage) async -> BackgroundFetchResult {
        var metadata: Logger.Metadata = ["message_id": "\(message.messageID ?? "-")", "cache": "\(cache.path)"]
        guard let forecast = Self.forecast(in: message) else {
            metadata["result"] = "noData"
            logger.info("silent push without forecast data", metadata: metadata)
            return .noData
        }
        do {
            switch try cache.update(forecast) {
            case .updated:
                metadata["result"] = "newData"
                logger.info("forecast refreshed", metadata: metadata)
                return .newData
            case .unchanged:
                metadata["result"] = "noData"
                logger.info("forecast unchanged", metadata: metadata)
                return .noData
            }
        } catch {
            metadata["result"] = "failed"
            metadata["error"] = "\(error)"
            logger.error("forecast cache not written", metadata: metadata)
            return .failed
        }
    }

    /// The cache's contents for `message`: its `data` entries as one JSON object, keys sorted, and a newline; `nil`
    /// when it has none.
    static func forecast(in message: RemoteMessage) -> [UInt8]? {
        let data = message.data
        guard !data.isEmpty else { return nil }
        var object = JSONObject()
        for key in data.keys.sorted() { object[key] = .string(data[key] ?? "") }
        return JSONValue.object(object).jsonBytes() + [UInt8(ascii: "\n")]
    }

    // MARK: TokenHandler

    /// Called at every start, once every plugin has started (the socket listens, the topic is subscribed), and
    /// whenever the token changes. A real app sends the token to its app server here (see the TokenWebhook plugin);
    /// this one prints it on standard output, which also tells scripts and tests that the daemon is ready.
    func didReceiveRegistrationToken(_ token: String?) async {
        logger.info("registration token", metadata: ["token": "\(token ?? "none")"])
        writeLine("registration token: \(token ?? "none")")
    }
}
