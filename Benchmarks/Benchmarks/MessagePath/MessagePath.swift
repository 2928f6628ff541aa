// The message path, measured: bus dispatch of pre-decoded messages to a no-op handler, and FCM v1
// JSON decoding with validation, beside parse-only figures for Herald's JSON parser and Foundation's
// JSONSerialization on the same bytes.
//
// Every iteration runs `benchmark.scaledIterations.count` operations (1,000: scaling factor .kilo); the
// tables show figures per operation (per message). Malloc counts are process-wide, so they include the
// loop thread's and the tasks'.

import Benchmark
import BenchmarkSupport
import Dispatch
import Foundation
import Herald
import HeraldJSONLExport
import HeraldPrometheusMetrics
import HeraldSQLite

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .throughput, .mallocCountTotal, .cpuTotal],
        timeUnits: .nanoseconds,
        warmupIterations: 10,
        scalingFactor: .kilo,
        maxDuration: .seconds(4),
        maxIterations: 20_000
    )

    Benchmark("FCM v1 decode + validate (374 B)") { benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(try FCMSendRequest.decode(fcmBody, context: context))
        }
    }

    Benchmark("JSON parse only: Herald JSONParser (374 B)") { benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(try JSONParser.parse(fcmBody))
        }
    }

    Benchmark("JSON parse only: Foundation JSONSerialization (374 B)") { benchmark in
        let data = Data(fcmBody)
        for _ in benchmark.scaledIterations {
            blackHole(try JSONSerialization.jsonObject(with: data))
        }
    }

    Benchmark(
        "bus dispatch to a no-op handler, in-memory store",
        configuration: .init(
            setup: { BusFixture.inMemory.start() }, teardown: { BusFixture.inMemory.stop() }
        )
    ) { benchmark in
        BusFixture.inMemory.dispatch(count: benchmark.scaledIterations.count)
    }

    // What automatic analytics cost the bus (the goal: under 15 %). The same in-memory dispatch with the two shipped sinks that
    // do real work per event (the JSON-lines export writing a file, Prometheus counting), each fed in batches off
    // the loop; one event (notification_receive) per message. Teardown prints what the sinks took and lost.
    Benchmark(
        "bus dispatch to a no-op handler, in-memory store, analytics on (JSONL + Prometheus)",
        configuration: .init(
            setup: { BusFixture.withAnalytics.start() }, teardown: { BusFixture.withAnalytics.stop() }
        )
    ) { benchmark in
        BusFixture.withAnalytics.dispatch(count: benchmark.scaledIterations.count)
    }

    Benchmark(
        "bus dispatch to a no-op handler, durable inbox (SQLite)",
        configuration: .init(
            setup: { BusFixture.durable.start() }, teardown: { BusFixture.durable.stop() }
        )
    ) { benchmark in
        BusFixture.durable.dispatch(count: benchmark.scaledIterations.count)
    }
}
