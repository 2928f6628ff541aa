import BenchmarkSupport
// Bus dispatch with and without analytics, for instruction counts that the load of a shared machine does not
// change (scripts/profile-bus runs it under valgrind --tool=callgrind). Dispatches COUNT pre-decoded data
// messages to a no-op handler, in rounds of 1,000 as the MessagePath benchmark does, then shuts down (which
// drains the sinks), so every event's cost — on the loop and in the sinks — is inside the run.
//
//   BusProfile COUNT [none|null|jsonl|prometheus|jsonl,prometheus]
import Dispatch
import Foundation
import Herald
import HeraldJSONLExport
import HeraldPrometheusMetrics

final class Box: @unchecked Sendable {
    // @unchecked Sendable: written before a semaphore signal, read after the matching wait.
    var message: RemoteMessage?
    var statistics: AnalyticsStatistics?
}

let arguments = CommandLine.arguments
let count = arguments.count > 1 ? Int(arguments[1]) ?? 10_000 : 10_000
let sinks = arguments.count > 2 ? arguments[2] : "none"
let directory = NSTemporaryDirectory() + "herald-busprofile-\(getpid())"
try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
defer { try? FileManager.default.removeItem(atPath: directory) }

var configuration = Herald.Configuration(senderID: "1")
configuration.maxInFlight = 4096
// HERALD_BENCH_BUFFER_LIMIT: room in each sink's queue. scripts/profile-bus gives room for every event, so that
// each one's whole cost (on the loop and in the sinks) is counted; the default is Herald's.
if let size = ProcessInfo.processInfo.environment["HERALD_BENCH_BATCH_SIZE"].flatMap({ Int($0) }) {
    configuration.analyticsBatchSize = size
}
if let limit = ProcessInfo.processInfo.environment["HERALD_BENCH_BUFFER_LIMIT"].flatMap({ Int($0) }) {
    configuration.analyticsBufferLimit = limit
}
let herald = Herald(configuration: configuration, store: InMemoryStore())
let handler = CountingHandler()
try herald.register(handler)
if sinks.contains("jsonl") { try herald.register(JSONLExport(options: .init(path: directory + "/delivery.jsonl"))) }
if sinks.contains("null") { try herald.register(NullSink()) }
if sinks.contains("prometheus") { try herald.register(PrometheusExporter(options: .init(address: .tcp(host: "127.0.0.1", port: 0)))) }

let box = Box()
let ready = DispatchSemaphore(value: 0)
Task.detached {
    try! await herald.start()
    let token = try! await herald.token()
    let body =
        #"{"message": {"token": "\#(token)", "data": {"customKey": "customValue"}, "fcm_options": {"analytics_label": "match-alerts"}}}"#
    var message = try! FCMSendRequest.decode(Array(body.utf8), context: herald.decodingContext).message
    message.userInfo[UserInfoKey.messageID] = nil
    box.message = message
    ready.signal()
}
ready.wait()
let message = box.message!
let bus = try herald.bus

/// The loop thread's CPU time, in nanoseconds.
func loopCPUTime() -> Int64 {
    let box = TimeBox()
    let done = DispatchSemaphore(value: 0)
    herald.loop.execute {
        var time = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
        box.nanoseconds = Int64(time.tv_sec) * 1_000_000_000 + Int64(time.tv_nsec)
        done.signal()
    }
    done.wait()
    return box.nanoseconds
}

final class TimeBox: @unchecked Sendable {
    // @unchecked Sendable: written before a semaphore signal, read after the matching wait.
    var nanoseconds: Int64 = 0
}
let cpuBefore = loopCPUTime()
let wallBefore = DispatchTime.now().uptimeNanoseconds
var left = count
while left > 0 {
    let round = min(1_000, left)
    left -= round
    herald.loop.execute { [handler] in
        handler.remaining = round
        for _ in 0..<round { bus.deliver(message) { _ in } }
    }
    handler.done.wait()
}
let wallAfter = DispatchTime.now().uptimeNanoseconds
let cpuAfter = loopCPUTime()
let stopped = DispatchSemaphore(value: 0)
Task.detached {
    box.statistics = try? await herald.analyticsStatistics()
    await herald.shutdown()
    stopped.signal()
}
stopped.wait()
if let statistics = box.statistics, !statistics.sinks.isEmpty {
    let perSink = statistics.sinks.sorted { $0.key < $1.key }.map {
        "\($0.key): delivered \($0.value.delivered), queued \($0.value.queued), lost \($0.value.lost)"
    }
    print("analytics: recorded \(statistics.recorded); " + perSink.joined(separator: "; "))
}
print(
    "dispatched \(count) with sinks: \(sinks): wall \((wallAfter - wallBefore) / UInt64(count)) ns/message, loop CPU \((cpuAfter - cpuBefore) / Int64(count)) ns/message"
)
