import Foundation
import Herald
import HeraldTesting
import Testing

@testable import HeraldDynamicPlugins

@Suite("DynamicPlugin: shared objects loaded with dlopen and called through the C ABI")
struct DynamicPluginTests {
    // MARK: The example plugin (Swift, HeraldPluginKit)

    @Test("the example plugin is loaded, registered in its roles, and its answers reach the bus")
    func examplePluginOnTheBus() async throws {
        let plugin = try DynamicPlugin.load(path: try sharedObject("HeraldExamplePlugin"))
        #expect(plugin.name == "example")
        #expect(!plugin.isSerial)
        #expect(PluginRoles.of(plugin) == [.notificationHandler, .messageHandler, .backgroundFetchWorker])
        var display = ""
        var data = ""
        var failing = ""
        var newData = ""
        var noData = ""
        var failed = ""
        try await withHerald(plugins: [plugin]) { herald, receiver, _ in
            #expect(herald.registeredPlugins.last?.descriptor.name == "example")
            #expect(herald.registeredPlugins.last?.roles == [.notificationHandler, .messageHandler, .backgroundFetchWorker])
            let token = try await herald.token()
            display = try await receiver.sendFCM(fcmBody(token: token, notification: ("Rain", "at five")), to: herald).get()
            data = try await receiver.sendFCM(fcmBody(token: token, data: ["kind": "digest"]), to: herald).get()
            failing = try await receiver.sendFCM(fcmBody(token: token, data: ["fail": "yes"]), to: herald).get()
            newData = try await receiver.sendFCM(fcmBody(token: token, apns: silentAPNs), to: herald).get()
            noData = try await receiver.sendFCM(fcmBody(token: token, data: ["result": "noData"], apns: silentAPNs), to: herald).get()
            failed = try await receiver.sendFCM(fcmBody(token: token, data: ["result": "failed"], apns: silentAPNs), to: herald).get()
            try await herald.waitUntilIdle()
            // Shutting down drains analytics into the sink below.
        } sinkAfterShutdown: { sink in
            let foreground = sink.events(named: .notificationForeground)
            #expect(foreground.map(\.messageID) == [display])
            #expect(foreground.first?.parameters["options"] == "[.banner, .sound]")
            let fetches = Dictionary(
                uniqueKeysWithValues: sink.events(named: .backgroundFetch).map { ($0.messageID ?? "", $0.parameters["result"] ?? "") })
            #expect(fetches == [newData: "newData", noData: "noData", failed: "failed"])
            let failures = sink.events(named: .diagnostic).filter { $0.parameters["detail"] == "handler_failed" }
            #expect(failures.map(\.messageID) == [failing])
            #expect(failures.first?.parameters["plugin"] == "example")
            #expect(failures.first?.parameters["error"] == "plugin example: did_receive_message failed with status 1")
            #expect(!failures.contains { $0.messageID == data })
        }
    }

    @Test("a plugin's categories (plugin ABI 1.1) are read at load and registered by the host")
    func examplePluginCategories() async throws {
        let plugin = try DynamicPlugin.load(path: try sharedObject("HeraldExamplePlugin"))
        let expected = NotificationCategory(
            identifier: "weather",
            actions: [
                NotificationAction(identifier: "details", title: "Details", options: .foreground),
                NotificationAction(
                    identifier: "comment", title: "Comment", textInputPlaceholder: "Your comment", textInputButtonTitle: "Send"),
            ])
        #expect(plugin.categories == [expected])
        // A plugin of ABI 1.0 (the C test plugin, without HERALD_PLUGIN_V1_1) declares none.
        #expect(try DynamicPlugin.load(path: try sharedObject("HeraldTestPlugin")).categories.isEmpty)
    }

    @Test("a C plugin of ABI 1.1 (a herald_plugin_v1_1 descriptor with HERALD_PLUGIN_V1_1) declares its categories")
    func cPluginCategories() throws {
        let plugin = try DynamicPlugin.load(path: try sharedObject("HeraldTestPluginSerial"))
        let expected = NotificationCategory(
            identifier: "invite",
            actions: [
                NotificationAction(identifier: "accept", title: "Accept", options: .foreground),
                NotificationAction(identifier: "decline", title: "Decline", options: .destructive),
                NotificationAction(identifier: "note", title: "Note", textInputPlaceholder: "Why", textInputButtonTitle: "Send"),
            ], options: .customDismissAction)
        #expect(plugin.categories == [expected])
        #expect(plugin.isSerial)
    }

    @Test(
        "categories_json that Herald cannot read names the member",
        arguments: [
            ("[]", "must be a JSON object of categories by identifier"),
            (#"{"c": {"actions": [{"title": "T"}]}}"#, "c.actions[0].identifier is missing"),
            (
                #"{"c": {"actions": [{"identifier": "a", "title": "T", "destructive": "yes"}]}}"#,
                "c.actions[0].destructive must be true or false"
            ),
            (#"{"c": {"actions": [{"identifier": "a", "title": "T", "colour": 1}]}}"#, "c.actions[0].colour is not a member Herald knows"),
            (#"{"c": {"dismiss": true}}"#, "c.dismiss is not a member Herald knows"),
        ])
    func badCategoriesJSON(json: String, problem: String) {
        do {
            _ = try CategoriesJSON.read(json)
            Issue.record("\(json) was accepted")
        } catch {
            #expect(error.message.hasPrefix(problem), "\(error.message)")
        }
    }

    @Test("a Swift plugin whose init(configuration:) throws is refused, with the path")
    func exampleRefusesItsConfiguration() throws {
        let path = try sharedObject("HeraldExamplePlugin")
        let error = dynamicPluginError { _ = try DynamicPlugin.load(path: path, configuration: ["prefix": 5]) }
        #expect(error == .initFailed(path: path, plugin: "example", status: 3))
        #expect(error?.description.contains(path) == true)
    }

    // MARK: The C test plugin: what goes over the ABI

    @Test("a C plugin gets the documented JSON for every call, and its integer answers become Herald's")
    func cPluginSeesTheDocumentedJSON() async throws {
        let directory = URL(fileURLWithPath: try makeTemporaryDirectory(prefix: "herald-dynamic-plugin"))
        defer { try? FileManager.default.removeItem(at: directory) }
        let record = directory.appendingPathComponent("calls")
        // Answers: present [.badge, .list] (9), fetch NO_DATA (1), data messages fail with status 7.
        let plugin = try DynamicPlugin.load(
            path: try sharedObject("HeraldTestPlugin"),
            configuration: [
                "record": .string(record.path), "present": 9, "fetch": 1, "message_status": 7,
            ])
        #expect(plugin.name == "test-plugin")
        #expect(PluginRoles.of(plugin) == [.notificationHandler, .messageHandler, .backgroundFetchWorker, .tokenHandler])
        let category = NotificationCategory(
            identifier: "REPLY", actions: [NotificationAction(identifier: "ANSWER", title: "Answer", textInputPlaceholder: "...")])
        var token = ""
        var display = ""
        var data = ""
        var silent = ""
        try await withHerald(plugins: [plugin], categories: [category]) { herald, receiver, _ in
            token = try await herald.token()
            let apns = #"{"headers": {"apns-collapse-id": "c1"}, "payload": {"aps": {"category": "REPLY"}}}"#
            display = try await receiver.sendFCM(
                fcmBody(token: token, notification: ("Tea", "is \\\"ready\\\"\\n"), data: ["pot": "2"], apns: apns), to: herald
            ).get()
            try await herald.waitUntilIdle()
            try await herald.respond(to: display, action: "ANSWER", userText: "coming ✓")
            data = try await receiver.sendFCM(fcmBody(token: token, data: ["kind": "digest"]), to: herald).get()
            // Handled before the next is sent: the plugin's calls may overlap, and the test checks their order.
            try await herald.waitUntilIdle()
            silent = try await receiver.sendFCM(fcmBody(token: token, apns: silentAPNs), to: herald).get()
            try await herald.waitUntilIdle()
        } sinkAfterShutdown: { sink in
            #expect(sink.events(named: .notificationForeground).first?.parameters["options"] == "[.list, .badge]")
            #expect(sink.events(named: .backgroundFetch).first?.parameters["result"] == "noData")
            let failure = sink.events(named: .diagnostic).first { $0.parameters["detail"] == "handler_failed" }
            #expect(failure?.messageID == data)
            #expect(failure?.parameters["error"] == "plugin test-plugin: did_receive_message failed with status 7")
        }

        let calls = recordedCalls(record)
        #expect(
            calls.map(\.call) == [
                "init", "did_receive_token", "will_present", "did_receive_response", "did_receive_message", "fetch", "max_concurrent",
                "deinit",
            ])
        #expect(calls.first?.json == ["record": .string(record.path), "present": 9, "fetch": 1, "message_status": 7])
        #expect(calls.first { $0.call == "did_receive_token" }?.argument == token)

        let presented = try #require(calls.first { $0.call == "will_present" }?.json?.objectValue)
        #expect(presented.keys == ["userInfo", "messageID", "from", "collapseKey", "priority", "receivedAt", "isReplay"])
        #expect(presented["messageID"] == .string(display))
        #expect(presented["from"] == "1234567890")
        #expect(presented["collapseKey"] == "c1")
        #expect(presented["priority"] == "high")
        #expect(presented["isReplay"] == false)
        #expect(presented["receivedAt"]?.intValue.map { $0 > 1_700_000_000_000 } == true)
        let userInfo = try #require(presented["userInfo"]?.objectValue)
        #expect(userInfo["aps"] == ["alert": ["title": "Tea", "body": "is \"ready\"\n"], "category": "REPLY"])
        #expect(userInfo["pot"] == "2")
        #expect(userInfo["gcm.message_id"] == .string(display))

        let response = try #require(calls.first { $0.call == "did_receive_response" }?.json?.objectValue)
        #expect(response["messageID"] == .string(display))
        #expect(response["action"] == "ANSWER")
        #expect(response["userText"] == "coming ✓")
        #expect(response["userInfo"] == presented["userInfo"])

        let message = try #require(calls.first { $0.call == "did_receive_message" }?.json?.objectValue)
        #expect(message["messageID"] == .string(data))
        #expect(message["userInfo"]?["kind"] == "digest")
        let fetch = try #require(calls.first { $0.call == "fetch" }?.json?.objectValue)
        #expect(fetch["messageID"] == .string(silent))
        #expect(fetch["priority"] == "normal")
        #expect(fetch["userInfo"]?["aps"] == ["content-available": 1])
    }

    @Test("a response with no typed text has \"userText\": null")
    func responseWithoutText() async throws {
        let directory = URL(fileURLWithPath: try makeTemporaryDirectory(prefix: "herald-dynamic-plugin"))
        defer { try? FileManager.default.removeItem(at: directory) }
        let record = directory.appendingPathComponent("calls")
        let plugin = try DynamicPlugin.load(path: try sharedObject("HeraldTestPlugin"), configuration: ["record": .string(record.path)])
        try await withHerald(plugins: [plugin]) { herald, receiver, _ in
            let token = try await herald.token()
            let id = try await receiver.sendFCM(fcmBody(token: token, notification: ("t", "b")), to: herald).get()
            try await herald.waitUntilIdle()
            try await herald.respond(to: id, action: NotificationResponse.dismissActionIdentifier)
        } sinkAfterShutdown: { sink in
            #expect(sink.events(named: .notificationForeground).first?.parameters["options"] == "[.list, .banner]")
        }
        let response = try #require(recordedCalls(record).first { $0.call == "did_receive_response" }?.json)
        #expect(response["action"] == .string(NotificationResponse.dismissActionIdentifier))
        #expect(response["userText"] == .null)
    }

    // MARK: Threads

    @Test("calls overlap for a plugin that allows it, and never for one that sets HERALD_PLUGIN_SERIAL")
    func serialFlag() async throws {
        let directory = URL(fileURLWithPath: try makeTemporaryDirectory(prefix: "herald-dynamic-plugin"))
        defer { try? FileManager.default.removeItem(at: directory) }
        for (product, serial) in [("HeraldTestPlugin", false), ("HeraldTestPluginSerial", true)] {
            let record = directory.appendingPathComponent(product)
            let plugin = try DynamicPlugin.load(
                path: try sharedObject(product),
                configuration: [
                    "record": .string(record.path), "sleep_ms": 40, "record_threads": 1,
                ], threads: 4)
            #expect(plugin.isSerial == serial)
            let message = RemoteMessage(userInfo: ["aps": ["content-available": 1]], target: .token("t"))
            let results = await withTaskGroup(of: BackgroundFetchResult.self) { group in
                for _ in 0..<8 { group.addTask { await plugin.fetch(message) } }
                return await group.reduce(into: []) { $0.append($1) }
            }
            #expect(results == Array(repeating: .newData, count: 8))
            await plugin.unload()
            let calls = recordedCalls(record)
            #expect(calls.filter { $0.call == "fetch" }.count == 8)
            // The plugin's own threads (named after it), never the event loop's or the cooperative pool's.
            let threads = calls.filter { $0.call == "thread" }.map(\.argument)
            #expect(threads.count == 8 && threads.allSatisfy { $0.hasPrefix("plugin-test-") }, "called from \(Set(threads))")
            let most = Int(calls.first { $0.call == "max_concurrent" }?.argument ?? "") ?? 0
            if serial {
                #expect(most == 1, "a serial plugin was called from \(most) threads at once")
            } else {
                #expect(most > 1 && most <= 4, "a concurrent plugin with 4 threads ran \(most) calls at once")
            }
        }
    }

    // MARK: Unloading

    @Test("unloading waits for running calls, deinitialises once, and later calls get the neutral answer")
    func unloadWaitsAndRefuses() async throws {
        let directory = URL(fileURLWithPath: try makeTemporaryDirectory(prefix: "herald-dynamic-plugin"))
        defer { try? FileManager.default.removeItem(at: directory) }
        let record = directory.appendingPathComponent("calls")
        let plugin = try DynamicPlugin.load(
            path: try sharedObject("HeraldTestPlugin"), configuration: ["record": .string(record.path), "sleep_ms": 300])
        let message = RemoteMessage(userInfo: ["aps": ["content-available": 1], "gcm.message_id": "m1"], target: .token("t"))
        // The plugin records a call when it begins, then sleeps 300 ms in it: a call that began after `started`
        // ends 300 ms after it at the earliest, and unload must not return before the call ends.
        let clock = ContinuousClock()
        let started = clock.now
        let running = Task { await plugin.fetch(message) }
        #expect(await eventually { () async in recordedCalls(record).map(\.call) == ["init", "fetch"] })
        await plugin.unload()
        #expect(clock.now - started >= .milliseconds(300), "unload returned while the fetch was still running")
        #expect(await running.value == .newData)
        #expect(recordedCalls(record).map(\.call) == ["init", "fetch", "max_concurrent", "deinit"])

        await plugin.unload()
        #expect(await (plugin as! any NotificationHandler).willPresent(message) == [])
        #expect(await (plugin as! any BackgroundFetchWorker).fetch(message) == .failed)
        await #expect(throws: DynamicPluginError.unavailable(plugin: "test-plugin", reason: "it has been unloaded")) {
            try await (plugin as! any MessageHandler).didReceive(message)
        }
        #expect(recordedCalls(record).map(\.call) == ["init", "fetch", "max_concurrent", "deinit"])
    }

    @Test("a plugin dropped without being unloaded is deinitialised when its last reference goes")
    func droppedPluginIsDeinitialised() throws {
        let directory = URL(fileURLWithPath: try makeTemporaryDirectory(prefix: "herald-dynamic-plugin"))
        defer { try? FileManager.default.removeItem(at: directory) }
        let record = directory.appendingPathComponent("calls")
        do {
            let plugin = try DynamicPlugin.load(path: try sharedObject("HeraldTestPlugin"), configuration: ["record": .string(record.path)])
            #expect(plugin.name == "test-plugin")
        }
        #expect(recordedCalls(record).map(\.call) == ["init", "max_concurrent", "deinit"])
    }

    // MARK: Refusals

    @Test("a missing file is refused as such, with its path")
    func missingFile() throws {
        let path = "/nonexistent/herald/libnothing.so"
        let error = dynamicPluginError { _ = try DynamicPlugin.load(path: path) }
        #expect(error == .fileNotFound(path: path))
        #expect(error?.description == "cannot load plugin /nonexistent/herald/libnothing.so: no such file")
    }

    @Test(
        "a plugin someone else could change is refused before it is opened: writable by its group or others, in a directory others may write, or another user's"
    )
    func unsafePermissions() throws {
        let directory = URL(fileURLWithPath: try makeTemporaryDirectory(prefix: "herald-dynamic-plugin"))
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("libcopy.so").path
        try FileManager.default.copyItem(atPath: try sharedObject("HeraldTestPlugin"), toPath: path)
        chmod(directory.path, 0o755)
        func refusal() -> String? {
            guard case .unsafePermissions(let reported, let reason)? = dynamicPluginError({ _ = try DynamicPlugin.load(path: path) }) else {
                return nil
            }
            #expect(reported == path)
            return reason
        }
        chmod(path, 0o666)
        #expect(refusal()?.contains("the file is writable by others (mode 666)") == true)
        chmod(path, 0o775)
        #expect(refusal()?.contains("the file is writable by its group (mode 775)") == true)
        chmod(path, 0o755)
        chmod(directory.path, 0o777)
        #expect(refusal()?.contains("its directory \(directory.path) is writable by others (mode 777)") == true)
        #expect(DynamicPluginError.unsafePermissions(path: path, reason: "r").description == "cannot load plugin \(path): r")
        chmod(directory.path, 0o1777)  // sticky, like /tmp: others cannot replace the file
        #expect(refusal() == nil)
        chmod(directory.path, 0o755)
        chown(path, 4321, 0)
        #expect(refusal()?.contains("the file belongs to uid 4321, neither root nor the user Herald runs as") == true)
        chown(path, geteuid(), 0)
        #expect(refusal() == nil)
    }

    @Test("a path without a slash is a file in the current directory, never looked up in the library path")
    func bareNameIsNotSearched() throws {
        let error = dynamicPluginError { _ = try DynamicPlugin.load(path: "libc.so.6") }
        #expect(error == .fileNotFound(path: "libc.so.6"))
    }

    @Test("a file that is not a shared object is refused with the dynamic linker's reason")
    func notASharedObject() throws {
        let directory = URL(fileURLWithPath: try makeTemporaryDirectory(prefix: "herald-dynamic-plugin"))
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("libgarbage.so").path
        try Data((0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }).write(to: URL(fileURLWithPath: path))
        let error = try #require(dynamicPluginError { _ = try DynamicPlugin.load(path: path) })
        guard case .notLoadable(let reported, let reason) = error else {
            Issue.record("expected notLoadable, got \(error)")
            return
        }
        #expect(reported == path)
        #expect(reason.contains(path) && reason.contains("ELF"), "dlerror() said: \(reason)")
        #expect(error.description.hasPrefix("cannot load plugin \(path): not a loadable shared object ("))
    }

    @Test("a shared object without herald_plugin_entry_v1 is refused")
    func missingEntryPoint() throws {
        let path = try cLibraryPath()
        let error = try #require(dynamicPluginError { _ = try DynamicPlugin.load(path: path) })
        guard case .missingEntryPoint(let reported, let symbol, let reason) = error else {
            Issue.record("expected missingEntryPoint, got \(error)")
            return
        }
        #expect(reported == path)
        #expect(symbol == "herald_plugin_entry_v1")
        #expect(reason.contains("herald_plugin_entry_v1"), "dlerror() said: \(reason)")
        #expect(error.description.contains(path))
    }

    @Test("a plugin of another ABI version is refused before anything else of it is read")
    func wrongABIVersion() throws {
        let path = try sharedObject("HeraldTestPluginBadABI")
        let error = dynamicPluginError { _ = try DynamicPlugin.load(path: path) }
        #expect(error == .unsupportedABIVersion(path: path, found: 999, supported: 1))
        #expect(
            error?.description
                == "cannot load plugin \(path): it was built for plugin ABI version 999; this Herald supports version 1 (rebuild it against this Herald's herald_plugin.h)"
        )
    }

    @Test("a plugin whose init_plugin fails is refused with its status")
    func initFails() throws {
        let path = try sharedObject("HeraldTestPlugin")
        let error = dynamicPluginError { _ = try DynamicPlugin.load(path: path, configuration: ["fail_init": 42]) }
        #expect(error == .initFailed(path: path, plugin: "test-plugin", status: 42))
    }

    // MARK: All or nothing

    @Test("loadAll loads every plugin, in order")
    func loadAllLoadsEverything() async throws {
        let plugins = try DynamicPlugin.loadAll(paths: [
            try sharedObject("HeraldExamplePlugin"), try sharedObject("HeraldTestPluginSerial"),
        ])
        #expect(plugins.map(\.name) == ["example", "test-plugin-serial"])
        for plugin in plugins { await plugin.unload() }
    }

    @Test("loadAll with one bad path loads nothing: the plugins loaded before it are deinitialised")
    func loadAllIsAllOrNothing() throws {
        let directory = URL(fileURLWithPath: try makeTemporaryDirectory(prefix: "herald-dynamic-plugin"))
        defer { try? FileManager.default.removeItem(at: directory) }
        let first = directory.appendingPathComponent("first")
        let second = directory.appendingPathComponent("second")
        let badABI = try sharedObject("HeraldTestPluginBadABI")
        let concurrent = try sharedObject("HeraldTestPlugin")
        let serial = try sharedObject("HeraldTestPluginSerial")
        let example = try sharedObject("HeraldExamplePlugin")
        var loaded: [DynamicPlugin] = []
        let error = dynamicPluginError {
            loaded = try DynamicPlugin.loadAll([
                .init(path: concurrent, configuration: ["record": .string(first.path)]),
                .init(path: serial, configuration: ["record": .string(second.path)]),
                .init(path: badABI),
                .init(path: "/nonexistent/libnever-reached.so"),
            ])
        }
        #expect(error == .unsupportedABIVersion(path: badABI, found: 999, supported: 1))
        #expect(loaded.isEmpty)
        #expect(recordedCalls(first).map(\.call) == ["init", "max_concurrent", "deinit"])
        #expect(recordedCalls(second).map(\.call) == ["init", "max_concurrent", "deinit"])

        let missing = dynamicPluginError { loaded = try DynamicPlugin.loadAll(paths: [example, "/nonexistent/libx.so"]) }
        #expect(missing == .fileNotFound(path: "/nonexistent/libx.so"))
        #expect(loaded.isEmpty)
    }
}

/// `withHerald`, then `check` with the sink once the instance has shut down (which hands the sinks every event).
func withHerald(
    plugins: [any HeraldPlugin],
    categories: [NotificationCategory] = [],
    _ body: (Herald, InMemoryReceiver, RecordingSink) async throws -> Void,
    sinkAfterShutdown check: (RecordingSink) throws -> Void
) async throws {
    var recording: RecordingSink?
    try await withHerald(plugins: plugins, categories: categories) { herald, receiver, sink in
        recording = sink
        try await body(herald, receiver, sink)
    }
    try check(try #require(recording))
}
