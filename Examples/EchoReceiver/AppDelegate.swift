import Herald

/// The reference AppDelegate of the FCM documentation for Apple apps, on Linux: it prints what it is
/// given, answers `[.list, .banner, .sound]` for notifications and `.newData` for silent messages.
final class AppDelegate: NotificationHandler, MessageHandler, BackgroundFetchWorker, TokenHandler, Sendable {
    let gcmMessageIDKey = "gcm.message_id"

    var descriptor: PluginDescriptor {
        PluginDescriptor(name: "echo-app-delegate", summary: "prints every message, answers like the reference AppDelegate")
    }

    // userNotificationCenter(_:willPresent:withCompletionHandler:)
    func willPresent(_ message: RemoteMessage) async -> PresentationOptions {
        let userInfo = message.userInfo
        if let messageID = userInfo[gcmMessageIDKey]?.stringValue { print("Message ID: \(messageID)") }
        print("willPresent userInfo: \(userInfo)")
        return [.list, .banner, .sound]
    }

    // userNotificationCenter(_:didReceive:withCompletionHandler:)
    func didReceive(_ response: NotificationResponse) async {
        let userInfo = response.message.userInfo
        if let messageID = userInfo[gcmMessageIDKey]?.stringValue { print("Message ID: \(messageID)") }
        print("didReceive response \(response.actionIdentifier) userInfo: \(userInfo)")
    }

    // Data-only messages.
    func didReceive(_ message: RemoteMessage) async throws {
        if let messageID = message.messageID { print("Message ID: \(messageID)") }
        print("message userInfo: \(message.userInfo)")
    }

    // application(_:didReceiveRemoteNotification:fetchCompletionHandler:)
    func fetch(_ message: RemoteMessage) async -> BackgroundFetchResult {
        if let messageID = message.messageID { print("Message ID: \(messageID)") }
        print("background fetch userInfo: \(message.userInfo)")
        return .newData
    }

    // messaging(_:didReceiveRegistrationToken:)
    func didReceiveRegistrationToken(_ token: String?) async {
        print("Firebase registration token: \(token ?? "none")")
    }
}
