import Foundation
import Herald
import HeraldTesting
import Testing

@testable import HeraldJSONLExport

@Suite("JSONLExport: FCM's delivery-metrics export as JSON lines", .serialized)
struct JSONLExportTests {
    @Test("lines have exactly FCM's columns, in order, with their types, and the values of the messages sent")
    func columnsTypesAndValues() async throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-jsonl")
        defer { removeTemporaryDirectory(directory) }
        let path = "\(directory)/metrics/delivery-metrics.jsonl"  // the directory is created at start
        let herald = Herald(configuration: patientShutdown(.init(senderID: "1234567890")))
        let export = JSONLExport(options: .init(path: path, appName: "com.example.weatherd"))
        let receiver = InMemoryReceiver()
        let handler = Presenting()
        try herald.register(receiver)
        try herald.register(export)
        try herald.register(handler)
        let before = WallClock.nowMilliseconds()
        try await herald.start()
        let token = try await herald.token()
        let installationID = try await herald.installationID()
        try await herald.subscribe(toTopic: "weather")

        let expiration = WallClock.nowSeconds() + 3600
        let display = try await deliverFCM(
            """
            {"message": {"token": "\(token)", "notification": {"title": "Rain", "body": "at noon"},
             "fcm_options": {"analytics_label": "spring-sale"},
             "apns": {"headers": {"apns-priority": "10", "apns-collapse-id": "forecast", "apns-expiration": "\(expiration)"}}}}
            """, to: herald)
        let topic = try await deliverFCM(
            """
            {"message": {"topic": "weather", "data": {"city": "Lyon"}, "fcm_options": {"analytics_label": "data-label"},
             "apns": {"headers": {"apns-priority": "5"}}}}
            """, to: herald)
        let duplicate = await herald.deliver(topic.message)
        let silent = try await deliverFCM(
            """
            {"message": {"token": "\(token)", "apns": {"headers": {"apns-priority": "5", "apns-push-type": "background"},
             "payload": {"aps": {"content-available": 1}}}}}
            """, to: herald)
        let stranger = try await deliverFCM(#"{"message": {"token": "someone-else", "data": {"a": "b"}}}"#, to: herald)
        let invalid = try await receiver.sendFCM(#"{"message": {"token": "x", "data": {"n": 1}}}"#, to: herald)
        #expect((try? display.outcome.get()) != nil)
        #expect((try? topic.outcome.get()) != nil)
        #expect((try? duplicate.get()) != nil)
        #expect((try? silent.outcome.get()) != nil)
        #expect(stranger.outcome.failure?.status == .unregistered)
        #expect(invalid.failure?.status == .invalidArgument)
        try await herald.waitUntilIdle()
        let displayID = try #require(display.message.messageID)
        let topicID = try #require(topic.message.messageID)
        let silentID = try #require(silent.message.messageID)
        let strangerID = try #require(stranger.message.messageID)
        try await herald.respond(to: displayID)
        await herald.shutdown()  // flushes analytics; the last batch comes after the plugin's stop()
        let after = WallClock.nowMilliseconds()

        let rows = exportedRows(path, kept: 5)
        var byKey: [String: JSONObject] = [:]
        for row in rows {
            let key = "\(row.string("message_id") ?? "-") \(row.string("event") ?? "-")"
            #expect(byKey[key] == nil, "two lines for \(key)")
            byKey[key] = row
        }
        #expect(
            Set(byKey.keys) == [
                "\(displayID) MESSAGE_DELIVERED", "\(displayID) notification_foreground", "\(displayID) MESSAGE_OPEN",
                "\(topicID) MESSAGE_DELIVERED", "\(topicID) message_dropped:duplicate",
                "\(silentID) MESSAGE_DELIVERED", "\(silentID) background_fetch:noData",
                "\(strangerID) message_dropped:not_targeted", "- INVALID_PARAMETERS",
            ], "token_refresh and topic_subscribe are not message events and are not written")

        for row in rows {
            #expect(row.integer("project_number") == 1_234_567_890)
            #expect(row.string("instance_id") == installationID)
            #expect(row.string("sdk_platform") == "LINUX")
            #expect(row.string("app_name") == "com.example.weatherd")
            #expect(row.isNull("bulk_id"))
            let timestamp = try #require(row.string("event_timestamp"))
            #expect(
                timestamp >= JSONLExport.bigQueryTimestamp(milliseconds: before)
                    && timestamp <= JSONLExport.bigQueryTimestamp(milliseconds: after))
        }
        let delivered = try #require(byKey["\(displayID) MESSAGE_DELIVERED"])
        #expect(delivered.string("message_type") == "DISPLAY_NOTIFICATION")
        #expect(delivered.string("analytics_label") == "spring-sale")
        #expect(delivered.string("collapse_key") == "forecast")
        #expect(delivered.integer("priority") == 10)
        #expect((3590...3600).contains(delivered.integer("ttl") ?? 0), "ttl \(String(describing: delivered.integer("ttl")))")
        #expect(delivered.isNull("topic"))
        #expect(byKey["\(displayID) MESSAGE_OPEN"]?.string("analytics_label") == "spring-sale")

        let topical = try #require(byKey["\(topicID) MESSAGE_DELIVERED"])
        #expect(topical.string("message_type") == "DATA_MESSAGE")
        #expect(topical.string("topic") == "/topics/weather")
        #expect(topical.string("analytics_label") == "data-label")
        #expect(topical.integer("priority") == 5)
        #expect(topical.isNull("ttl"))
        #expect(topical.isNull("collapse_key"))

        #expect(byKey["\(silentID) MESSAGE_DELIVERED"]?.string("message_type") == "DATA_MESSAGE")
        let invalidRow = try #require(byKey["- INVALID_PARAMETERS"])
        #expect(invalidRow.isNull("message_id") && invalidRow.isNull("message_type") && invalidRow.isNull("priority"))
    }

    @Test("instance_id from the installationID closure; project_number null when the sender ID is not a number")
    func identityColumns() async throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-jsonl")
        defer { removeTemporaryDirectory(directory) }
        let path = "\(directory)/metrics.jsonl"
        let herald = Herald(configuration: patientShutdown(.init(senderID: "my-project")))
        let export = JSONLExport(options: .init(path: path, events: .fcmEventsOnly), installationID: { "fid-from-closure" })
        try herald.register(export)
        try await herald.start()
        let token = try await herald.token()
        let first = try await deliverFCM(#"{"message": {"token": "\#(token)", "data": {"n": "1"}}}"#, to: herald)
        _ = await herald.deliver(first.message)  // a duplicate: no FCM counterpart, skipped with .fcmEventsOnly
        try await herald.waitUntilIdle()
        await herald.shutdown()
        let rows = exportedRows(path, kept: 5)
        #expect(rows.count == 1)
        #expect(rows.first?.string("event") == "MESSAGE_DELIVERED")
        #expect(rows.first?.string("instance_id") == "fid-from-closure")
        #expect(rows.first?.isNull("project_number") == true)
        #expect(rows.first?.isNull("app_name") == true)
    }

    @Test("every Herald event: FCM's name, Herald's name, or no line")
    func eventNames() {
        func name(_ event: AnalyticsEvent, _ selection: JSONLExport.EventSelection = .messageEvents) -> String? {
            JSONLExport.exportedEventName(for: event, selection: selection)
        }
        func dropped(_ reason: AnalyticsEvent.DropReason) -> AnalyticsEvent {
            AnalyticsEvent(name: .messageDropped, messageID: "m", parameters: ["reason": reason.rawValue])
        }
        #expect(name(AnalyticsEvent(name: .notificationReceive, messageID: "m")) == "MESSAGE_DELIVERED")
        #expect(name(AnalyticsEvent(name: .notificationOpen, messageID: "m")) == "MESSAGE_OPEN")
        #expect(name(AnalyticsEvent(name: .notificationForeground, messageID: "m")) == "notification_foreground")
        #expect(name(AnalyticsEvent(name: .notificationBackground, messageID: "m")) == "notification_background")
        #expect(name(AnalyticsEvent(name: .notificationDismiss, messageID: "m")) == "notification_dismiss")
        #expect(
            name(AnalyticsEvent(name: .backgroundFetch, messageID: "m", parameters: ["result": "newData"])) == "background_fetch:newData")
        #expect(name(dropped(.invalid)) == "INVALID_PARAMETERS")
        #expect(name(dropped(.rejectedBackpressure)) == "QUOTA_EXCEEDED")
        #expect(name(dropped(.storeFailure)) == "MESSAGE_RECEIVED_INTERNAL_ERROR")
        for reason: AnalyticsEvent.DropReason in [.duplicate, .expired, .notTargeted, .collapsed, .quarantined, .unregistered] {
            #expect(name(dropped(reason)) == "message_dropped:\(reason.rawValue)")
            #expect(name(dropped(reason), .fcmEventsOnly) == nil)
        }
        for skipped: AnalyticsEvent.Name in [.tokenRefresh, .topicSubscribe, .topicUnsubscribe, .diagnostic] {
            #expect(name(AnalyticsEvent(name: skipped, messageID: "m", topic: "t")) == nil, "\(skipped)")
        }
        #expect(name(AnalyticsEvent(name: .notificationForeground, messageID: "m"), .fcmEventsOnly) == nil)
        #expect(name(AnalyticsEvent(name: .notificationReceive, messageID: "m"), .fcmEventsOnly) == "MESSAGE_DELIVERED")
        // A UnifiedPush push: accepted by Herald as its push service, then delivered to its app.
        let push = AnalyticsEvent(name: .notificationReceive, messageID: "p", messageType: AnalyticsEvent.unifiedPush)
        #expect(name(push) == "MESSAGE_ACCEPTED")
        #expect(
            name(AnalyticsEvent(name: .messageDelivered, messageID: "p", messageType: AnalyticsEvent.unifiedPush)) == "MESSAGE_DELIVERED")
        // Every name and reason is decided (a new one fails here until it is).
        #expect(AnalyticsEvent.Name.allCases.count == 12)
        #expect(AnalyticsEvent.DropReason.allCases.count == 9)
    }

    @Test("event_timestamp is written as BigQuery writes a TIMESTAMP")
    func timestamps() {
        #expect(JSONLExport.bigQueryTimestamp(milliseconds: 0) == "1970-01-01 00:00:00.000 UTC")
        #expect(JSONLExport.bigQueryTimestamp(milliseconds: 1_740_830_400_123) == "2025-03-01 12:00:00.123 UTC")
        #expect(JSONLExport.bigQueryTimestamp(milliseconds: 951_782_400_007) == "2000-02-29 00:00:00.007 UTC")
        #expect(JSONLExport.bigQueryTimestamp(milliseconds: -1) == "1969-12-31 23:59:59.999 UTC")
    }

    @Test("integers are written in decimal as String(_:) writes them, the extremes included")
    func decimals() {
        for value: Int64 in [0, 1, -1, 9, 10, 99, 100, 1_234_567_890, -987_654_321, .max, .min, .max - 1, .min + 1] {
            var bytes: [UInt8] = []
            JSONLExport.appendDecimal(value, to: &bytes)
            #expect(String(decoding: bytes, as: UTF8.self) == String(value))
        }
    }

    @Test("one batch spanning seconds, days and 1970: each line's event_timestamp is its own (the per-second cache)")
    func timestampsInABatch() async throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-jsonl")
        defer { removeTemporaryDirectory(directory) }
        let path = "\(directory)/metrics.jsonl"
        let export = JSONLExport(options: .init(path: path))
        let times: [Int64] = [
            1_740_830_400_123, 1_740_830_400_999, 1_740_830_401_000, 1_740_830_400_001, 1_740_873_599_999, 1_740_873_600_000, 0, -1, -1_000,
            5, 253_402_300_799_999,
        ]
        try await export.record(
            times.enumerated().map { index, time in
                var event = receiveEvent("m\(index)")
                event.timestamp = time
                return event
            })
        await export.stop()
        let written = exportedRows(path, kept: 0).compactMap { $0.string("event_timestamp") }
        #expect(written == times.map { JSONLExport.bigQueryTimestamp(milliseconds: $0) })
        #expect(
            written[4] == "2025-03-01 23:59:59.999 UTC" && written[5] == "2025-03-02 00:00:00.000 UTC"
                && written[7] == "1969-12-31 23:59:59.999 UTC")
    }

    @Test("rotation under load through a real instance: 20,000 messages, nothing lost, nothing split, no file over the limit")
    func rotationUnderLoadThroughHerald() async throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-jsonl")
        defer { removeTemporaryDirectory(directory) }
        let path = "\(directory)/metrics.jsonl"
        let limit = 64 << 10
        let kept = 400
        var configuration = Herald.Configuration(senderID: "1234567890")
        configuration.analyticsBatchSize = 100
        // Room for every event: this test is about rotation, not about a sink that falls behind (a loaded CI
        // machine's fsyncs at each rotation can put the export more than the default 10,000 events behind).
        configuration.analyticsBufferLimit = 100_000
        let herald = Herald(configuration: patientShutdown(configuration))
        let export = JSONLExport(options: .init(path: path, maximumFileBytes: limit, keptFiles: kept))
        let recording = RecordingSink()
        try herald.register(export)
        try herald.register(recording)
        try await herald.start()
        let token = try await herald.token()
        let senders = 8
        let perSender = 2_500
        try await withThrowingTaskGroup(of: Void.self) { group in
            for sender in 0..<senders {
                group.addTask {
                    for index in 0..<perSender {
                        let label = "s\(sender)"
                        let outcome = try await deliverFCM(
                            #"{"message": {"token": "\#(token)", "data": {"n": "\#(index)"}, "fcm_options": {"analytics_label": "\#(label)"}}}"#,
                            to: herald
                        ).outcome
                        #expect((try? outcome.get()) != nil)
                    }
                }
            }
            try await group.waitForAll()
        }
        try await herald.waitUntilIdle()
        let statistics = try await herald.analyticsStatistics()
        #expect(statistics.sinks["jsonl-export"]?.lost == 0 && statistics.sinks["jsonl-export"]?.failures == 0, "\(statistics)")
        await herald.shutdown()

        let expected = recording.recorded.compactMap { event in
            JSONLExport.exportedEventName(for: event).map { "\(event.messageID ?? "-") \($0)" }
        }
        #expect(expected.count == senders * perSender)
        let rows = exportedRows(path, kept: kept, limit: limit)
        let written = rows.map { "\($0.string("message_id") ?? "-") \($0.string("event") ?? "-")" }
        #expect(written.count == expected.count)
        #expect(Set(written).count == written.count, "no line written twice")
        let missing = Set(expected).subtracting(written)
        let unexpected = Set(written).subtracting(expected)
        #expect(
            missing.isEmpty && unexpected.isEmpty,
            "\(missing.count) missing (\(missing.prefix(3))), \(unexpected.count) unexpected (\(unexpected.prefix(3)))")
        #expect(exportFiles(path, kept: kept).count > 10, "the load rotated the file many times")
        #expect(!fileExists("\(path).\(kept + 1)"))
    }

    @Test("rotation under concurrent batches: 16 writers, 20,000 events, nothing lost, nothing split, no file over the limit")
    func rotationUnderConcurrentBatches() async throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-jsonl")
        defer { removeTemporaryDirectory(directory) }
        let path = "\(directory)/metrics.jsonl"
        let limit = 32 << 10
        let kept = 300
        let export = JSONLExport(options: .init(path: path, maximumFileBytes: limit, keptFiles: kept))
        let writers = 16
        let batches = 10
        let batchSize = 125
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<writers {
                group.addTask {
                    for batch in 0..<batches {
                        let events = (0..<batchSize).map { receiveEvent("w\(writer)-b\(batch)-\($0)", label: "writer-\(writer)") }
                        try await export.record(events)
                    }
                }
            }
            try await group.waitForAll()
        }
        await export.stop()
        let rows = exportedRows(path, kept: kept, limit: limit)
        let ids = rows.compactMap { $0.string("message_id") }
        #expect(ids.count == writers * batches * batchSize)
        #expect(Set(ids).count == ids.count)
        // A batch is one write: its lines are contiguous, in order, whatever the other writers did.
        var previous: [String: (batch: Int, line: Int)] = [:]
        for id in ids {
            let parts = id.split(separator: "-")
            let writer = String(parts[0])
            let batch = Int(parts[1].dropFirst())!
            let line = Int(parts[2])!
            if let last = previous[writer] {
                #expect((batch == last.batch && line == last.line + 1) || (batch == last.batch + 1 && line == 0), "\(id) after \(last)")
            }
            previous[writer] = (batch, line)
        }
    }

    @Test("rotation keeps keptFiles files, removes the oldest, and keeps the newest lines in order")
    func keptFiles() async throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-jsonl")
        defer { removeTemporaryDirectory(directory) }
        let path = "\(directory)/metrics.jsonl"
        let export = JSONLExport(options: .init(path: path, maximumFileBytes: 1_000, keptFiles: 2))
        for index in 0..<40 { try await export.record([receiveEvent("message-\(index)")]) }
        await export.stop()
        #expect(fileExists(path) && fileExists("\(path).1") && fileExists("\(path).2"))
        #expect(!fileExists("\(path).3"))
        let ids = exportedRows(path, kept: 2, limit: 1_000).compactMap { $0.string("message_id") }
        #expect(!ids.isEmpty && ids.count < 40)
        #expect(ids == (40 - ids.count..<40).map { "message-\($0)" })
    }

    @Test("a write that fails half-way is taken back; the retried batch is written once, even across a rotation")
    func partialWriteAndRetry() async throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-jsonl")
        defer { removeTemporaryDirectory(directory) }
        let path = "\(directory)/metrics.jsonl"
        let limit = 2_000
        let export = JSONLExport(options: .init(path: path, maximumFileBytes: limit, keptFiles: 50))
        let batch = (0..<20).map { receiveEvent("retry-\($0)") }
        // The first file takes some lines; the write into the next file fails after 500 more bytes.
        export.injectWriteFault(afterBytes: 1_800 + 500, code: EIO)
        let failure = await #expect(throws: JSONLExportError.self) { try await export.record(batch) }
        #expect(failure?.operation == .write)
        #expect(failure?.path == path)
        #expect(failure?.code == EIO)
        #expect(failure?.description.contains(path) == true)
        let partial = exportedRows(path, kept: 50, limit: limit)
        #expect(!partial.isEmpty && partial.count < 20, "some lines made it, in whole lines only")
        #expect(exportFiles(path, kept: 50).count == 2, "the failed write came after a rotation")
        export.removeWriteFault()
        // Another batch in between does not make the export forget the failed one.
        try await export.record([receiveEvent("between")])
        // Still failing: no bytes at all.
        export.injectWriteFault(afterBytes: 0, code: ENOSPC)
        await #expect(throws: JSONLExportError.self) { try await export.record(batch) }
        export.removeWriteFault()
        try await export.record(batch)
        await export.stop()
        let ids = exportedRows(path, kept: 50, limit: limit).compactMap { $0.string("message_id") }
        #expect(ids.filter { $0.hasPrefix("retry-") } == (0..<20).map { "retry-\($0)" })
        #expect(ids.count == 21)
    }

    @Test("through the analytics pipeline: a batch that fails half-way across a rotation is retried and written once")
    func pipelineRetriesPartialBatch() async throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-jsonl")
        defer { removeTemporaryDirectory(directory) }
        let path = "\(directory)/metrics.jsonl"
        let limit = 4_000
        var configuration = Herald.Configuration(senderID: "1234567890")
        configuration.analyticsBatchSize = 60
        configuration.analyticsFlushInterval = .seconds(30)  // the batch is handed over when full
        configuration.analyticsRetryDelay = .milliseconds(20)
        let herald = Herald(configuration: patientShutdown(configuration))
        let export = JSONLExport(options: .init(path: path, maximumFileBytes: limit, keptFiles: 50))
        let recording = RecordingSink()
        try herald.register(export)
        try herald.register(recording)
        try await herald.start()
        let token = try await herald.token()
        // The first attempt gets past one rotation and fails in the middle of a line of the second file.
        export.injectWriteFault(afterBytes: limit + 1_234, code: EIO, once: true)
        var sent: [String] = []
        for index in 0..<59 {  // with token_refresh at start: 60 events, one batch
            let message = try await deliverFCM(#"{"message": {"token": "\#(token)", "data": {"n": "\#(index)"}}}"#, to: herald).message
            sent.append(try #require(message.messageID))
        }
        try await herald.waitUntilIdle()
        #expect(await eventually { (try? await herald.analyticsStatistics().sinks["jsonl-export"]?.delivered) == 60 })
        let statistics = try await herald.analyticsStatistics().sinks["jsonl-export"]
        #expect(statistics?.failures == 1, "the failed attempt is counted")
        #expect(statistics?.lost == 0)
        await herald.shutdown()
        let ids = exportedRows(path, kept: 50, limit: limit).compactMap { $0.string("message_id") }
        #expect(ids == sent, "every line once, in order, none split")
        #expect(exportFiles(path, kept: 50).count >= 5)
    }

    @Test("a failed write throws a typed error naming the file, and the daemon goes on (/dev/full, never rotated)")
    func writeFailureDeviceFull() async throws {
        var configuration = Herald.Configuration(senderID: "1234567890")
        configuration.analyticsMaximumAttempts = 2
        configuration.analyticsRetryDelay = .milliseconds(10)
        let herald = Herald(configuration: patientShutdown(configuration))
        let export = JSONLExport(options: .init(path: "/dev/full", maximumFileBytes: 256, keptFiles: 2))
        let handler = Presenting()
        try herald.register(export)
        try herald.register(handler)
        try await herald.start()
        let token = try await herald.token()
        for index in 0..<5 {
            let outcome = try await deliverFCM(#"{"message": {"token": "\#(token)", "data": {"n": "\#(index)"}}}"#, to: herald).outcome
            #expect((try? outcome.get()) != nil)
        }
        let failure = await #expect(throws: JSONLExportError.self) {
            try await export.record((0..<10).map { receiveEvent("full-\($0)") })
        }
        #expect(failure == JSONLExportError(.write, path: "/dev/full", code: ENOSPC))
        #expect(failure?.description.contains("/dev/full") == true)
        try await herald.waitUntilIdle()
        let after = try await deliverFCM(#"{"message": {"token": "\#(token)", "data": {"n": "after"}}}"#, to: herald).outcome
        #expect((try? after.get()) != nil)
        try await herald.waitUntilIdle()
        #expect(handler.received.withLock { $0.count } == 6, "messages keep flowing while the export fails")
        #expect(
            await eventually { ((try? await herald.analyticsStatistics().sinks["jsonl-export"]?.failures) ?? 0) >= 2 },
            "the pipeline counts the failures")
        await herald.shutdown()
        #expect(!fileExists("/dev/full.1"), "a device is never rotated")
    }

    @Test("a removed directory: writes throw naming the file until it is back; the retried batch is written once")
    func removedDirectory() async throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-jsonl")
        defer { removeTemporaryDirectory(directory) }
        let path = "\(directory)/out/metrics.jsonl"
        let herald = Herald(configuration: patientShutdown(.init(senderID: "1234567890")))
        let export = JSONLExport(options: .init(path: path))
        try herald.register(export)
        try await herald.start()
        try await export.record([receiveEvent("before")])
        #expect(exportedRows(path, kept: 5).count == 1)
        removeTemporaryDirectory("\(directory)/out")
        let batch = [receiveEvent("during-1"), receiveEvent("during-2")]
        let failure = await #expect(throws: JSONLExportError.self) { try await export.record(batch) }
        #expect(failure == JSONLExportError(.open, path: path, code: ENOENT))
        #expect(failure?.description.contains(path) == true)
        #expect(!fileExists("\(directory)/out"), "the directory is not created again behind the operator's back")
        #expect(mkdir("\(directory)/out", 0o755) == 0)
        try await export.record(batch)
        await herald.shutdown()
        #expect(exportedRows(path, kept: 5).compactMap { $0.string("message_id") } == ["during-1", "during-2"])
    }

    @Test("a path that cannot be used stops the start with an error naming it")
    func unusablePathAtStart() async throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-jsonl")
        defer { removeTemporaryDirectory(directory) }
        let blocker = "\(directory)/not-a-directory"
        #expect(FileManager.default.createFile(atPath: blocker, contents: Data("x".utf8)))
        let path = "\(blocker)/metrics.jsonl"
        let herald = Herald(configuration: patientShutdown(.init(senderID: "1234567890")))
        try herald.register(JSONLExport(options: .init(path: path)))
        do {
            try await herald.start()
            Issue.record("start succeeded with \(path)")
            await herald.shutdown()
        } catch {
            #expect("\(error)".contains(path), "\(error)")
            #expect("\(error)".contains("jsonl-export"), "\(error)")
        }
    }

    @Test("the pipeline's path (lines from the recorded bytes) writes byte for byte the lines of the events' path")
    func recordsPathMatchesEventsPath() async throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-jsonl")
        defer { removeTemporaryDirectory(directory) }
        let events = awkwardEvents()
        let identities: [(JSONLExport.Options, String?)] = [
            (.init(appName: "com.example.weatherd", projectNumber: 1_234_567_890), "fid-1:tail"),
            (.init(appName: "a \"quoted\" \\ app\u{1}", sdkPlatform: "LINUX/ärm\t", events: .fcmEventsOnly), nil),
            (.init(projectNumber: -5), "f\"i\\d\n✓:x"),
        ]
        for (index, (options, token)) in identities.enumerated() {
            var fromEvents = options
            fromEvents.path = "\(directory)/events-\(index).jsonl"
            var fromRecords = options
            fromRecords.path = "\(directory)/records-\(index).jsonl"
            let eventsExport = JSONLExport(options: fromEvents)
            let recordsExport = JSONLExport(options: fromRecords)
            for export in [eventsExport, recordsExport] { await export.didReceiveRegistrationToken(token) }
            // Whole, then in two batches (the second spanning a new second), as the pipeline may hand them over.
            try await eventsExport.record(events)
            try await recordsExport.record(AnalyticsRecords(events))
            try await eventsExport.record(Array(events.prefix(7)))
            try await eventsExport.record(Array(events.dropFirst(7)))
            try await recordsExport.record(AnalyticsRecords(Array(events.prefix(7))))
            try await recordsExport.record(AnalyticsRecords(Array(events.dropFirst(7))))
            await eventsExport.stop()
            await recordsExport.stop()
            let expected = try Data(contentsOf: URL(fileURLWithPath: fromEvents.path))
            let written = try Data(contentsOf: URL(fileURLWithPath: fromRecords.path))
            #expect(expected.count > 2_000, "lines were written")
            #expect(
                written == expected, "\(String(decoding: written, as: UTF8.self))\nis not\n\(String(decoding: expected, as: UTF8.self))")
            // Every line parses, with exactly the columns and their types (the escaping is valid JSON).
            #expect(!exportedRows(fromRecords.path, kept: 0).isEmpty)
        }
    }

    @Test("a batch read from records that fails half-way is written once when retried, as the events' path does")
    func recordsPathRetriesPartialBatch() async throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-jsonl")
        defer { removeTemporaryDirectory(directory) }
        let path = "\(directory)/metrics.jsonl"
        let limit = 2_000
        let export = JSONLExport(options: .init(path: path, maximumFileBytes: limit, keptFiles: 50))
        let batch = (0..<20).map { index in
            var event = receiveEvent("retry-\(index)")
            event.id = 1_000 + UInt64(index)
            return event
        }
        export.injectWriteFault(afterBytes: 1_800 + 500, code: EIO)
        await #expect(throws: JSONLExportError.self) { try await export.record(AnalyticsRecords(batch)) }
        export.removeWriteFault()
        var other = receiveEvent("between")
        other.id = 5_000
        try await export.record(AnalyticsRecords([other]))
        try await export.record(AnalyticsRecords(batch))
        await export.stop()
        let ids = exportedRows(path, kept: 50, limit: limit).compactMap { $0.string("message_id") }
        #expect(ids.filter { $0.hasPrefix("retry-") } == (0..<20).map { "retry-\($0)" })
        #expect(ids.count == 21)
    }

    @Test("a torn last line left by a crash is cut off when the file is opened; whole lines are kept")
    func tornTailRepaired() async throws {
        let directory = try makeTemporaryDirectory(prefix: "herald-jsonl")
        defer { removeTemporaryDirectory(directory) }
        let path = "\(directory)/metrics.jsonl"
        let earlier = JSONLExport(options: .init(path: path))
        try await earlier.record([receiveEvent("old-1"), receiveEvent("old-2")])
        await earlier.stop()
        let handle = try #require(FileHandle(forWritingAtPath: path))
        handle.seekToEndOfFile()
        handle.write(Data(#"{"event_timestamp":"2025-03-01 12:"#.utf8))
        handle.closeFile()

        let herald = Herald(configuration: patientShutdown(.init(senderID: "1234567890")))
        try herald.register(JSONLExport(options: .init(path: path)))
        try await herald.start()
        let token = try await herald.token()
        let sent = try await deliverFCM(#"{"message": {"token": "\#(token)", "data": {"n": "1"}}}"#, to: herald)
        try await herald.waitUntilIdle()
        await herald.shutdown()
        let ids = exportedRows(path, kept: 5).compactMap { $0.string("message_id") }
        #expect(ids == ["old-1", "old-2", try #require(sent.message.messageID)])
    }
}

extension DeliveryOutcome {
    var failure: MessageError? {
        guard case .failure(let error) = self else { return nil }
        return error
    }
}
