// A handler plugin built as a shared object (.build/debug/libHeraldExamplePlugin.so) and loaded by Herald at
// run time: `herald serve --plugin .build/debug/libHeraldExamplePlugin.so`, or `DynamicPlugin.load(path:)` in a
// host. It imports only HeraldPluginKit, never Herald: the shared object carries its own copy of the kit.
//
// - Display notifications: presented as a banner with a sound.
// - Data-only messages: written to standard error; one with a data key `fail` fails (Herald records it).
// - Silent messages: answered `.newData`, or what their data key `result` says (`noData`, `failed`).
// - Responses: written to standard error.
// - Categories: `weather` (notifications with `aps.category: weather`) offers "Details" and a text reply; Herald
//   registers it when it loads the plugin.
import Glibc
import HeraldPluginKit

final class ExampleHandler: DynamicNotificationHandler, DynamicMessageHandler, DynamicFetchWorker {
    static let name = "example"
    static let categories: JSONObject = [
        "weather": [
            "actions": [
                ["identifier": "details", "title": "Details", "foreground": true],
                ["identifier": "comment", "title": "Comment", "text-input": ["button-title": "Send", "placeholder": "Your comment"]],
            ]
        ]
    ]

    /// Put before every line this plugin writes; configurable (`{"prefix": "..."}`).
    let prefix: String

    /// Throwing refuses the load: Herald stops with an error naming this library.
    init(configuration: JSONObject) throws {
        switch configuration["prefix"] {
        case nil: prefix = "example"
        case .string(let value)?: prefix = value
        case let other?: throw ExampleError.badConfiguration("prefix must be a string, not \(other)")
        }
    }

    func willPresent(_ message: PluginMessage) -> PresentationOptions {
        log("notification \(message.messageID ?? "-"): \(message.title ?? "") \(message.body ?? "")")
        return [.banner, .sound]
    }

    func didReceive(_ response: PluginResponse) {
        log("response to \(response.message.messageID ?? "-"): \(response.actionIdentifier)\(response.userText.map { " \"\($0)\"" } ?? "")")
    }

    func didReceive(_ message: PluginMessage) throws {
        log("data message \(message.messageID ?? "-"): \(message.userInfo)")
        if message.data["fail"] != nil { throw ExampleError.asked }
    }

    func fetch(_ message: PluginMessage) -> BackgroundFetchResult {
        switch message.data["result"] {
        case "noData": .noData
        case "failed": .failed
        default: .newData
        }
    }

    private func log(_ text: String) {
        let line = Array("\(prefix): \(text)\n".utf8)
        line.withUnsafeBytes { _ = write(2, $0.baseAddress, $0.count) }
    }
}

enum ExampleError: Error {
    case asked
    case badConfiguration(String)
}

/// The entry point Herald looks up. `export` builds the C descriptor from ExampleHandler's conformances.
@_cdecl("herald_plugin_entry_v1")
public func heraldPluginEntry() -> UnsafeRawPointer {
    HeraldPluginKit.export(ExampleHandler.self)
}
