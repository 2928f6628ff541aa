// DesktopNotifier: a small daemon for a Linux desktop that embeds Herald with the desktop presenter.
//
// It shows the notifications it receives through the desktop's notification service (GNOME Shell, KDE Plasma,
// dunst, mako, ...), with the actions of the category "message" — Archive, Open, and Reply with a text field
// where the server has inline replies (KDE) — and prints every response a person gives, one line each:
//
//     response <message ID> <action>[ "<typed text>"]
//
// Messages come as FCM v1 send bodies, one JSON object per line, on the Unix socket given as the argument
// (desktop-notifier.sock by default). Run it in a desktop session and try:
//
//     swift run DesktopNotifier /tmp/notifier.sock
//     echo '{"message": {"token": "<the printed token>", "notification": {"title": "Ana", "body": "Lunch?"},
//            "apns": {"payload": {"aps": {"category": "message"}}}}}' | nc -U -q1 /tmp/notifier.sock
//
// SIGINT or SIGTERM stops it.

import Glibc
import Herald
import HeraldDesktopPresenter
import HeraldSocketReceiver

@main
struct DesktopNotifier {
    static func main() async throws {
        let socket = CommandLine.arguments.dropFirst().first ?? "desktop-notifier.sock"
        let herald = Herald(configuration: .init(senderID: "1234567890"))
        var options = DesktopPresenter.Options()
        options.appName = "Desktop Notifier"
        try herald.register(DesktopPresenter(options: options))
        try herald.register(SocketReceiver(options: .init(addresses: [.unix(path: socket)])))
        try herald.register(Responses())
        try herald.register(
            category: NotificationCategory(
                identifier: "message",
                actions: [
                    NotificationAction(identifier: "archive", title: "Archive", options: .destructive),
                    NotificationAction(identifier: "open", title: "Open", options: .foreground),
                    NotificationAction(
                        identifier: "reply", title: "Reply", textInputPlaceholder: "Your answer", textInputButtonTitle: "Send"),
                ],
                options: .customDismissAction))
        try await herald.start()
        print("token: \(try await herald.token())")
        let loop = herald.loop
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            loop.execute {
                for signal in [SIGINT, SIGTERM] {
                    _ = try? SignalWatcher.watch(signal, on: loop) { _ in continuation.resume() }
                }
                print("listening on \(socket); SIGINT or SIGTERM stops")
                fflush(nil)
            }
        }
        await herald.shutdown()
    }
}

/// Presents every notification as a banner with sound, and prints the responses.
final class Responses: NotificationHandler {
    func willPresent(_ message: RemoteMessage) async -> PresentationOptions {
        print("presenting \(message.messageID ?? "-"): \(message.aps.alert?.title ?? "")")
        fflush(nil)
        return [.banner, .list, .sound]
    }

    func didReceive(_ response: NotificationResponse) async {
        let text = response.userText.map { " \"\($0)\"" } ?? ""
        print("response \(response.message.messageID ?? "-") \(response.actionIdentifier)\(text)")
        fflush(nil)
    }
}
