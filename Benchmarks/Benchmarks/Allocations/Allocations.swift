// The allocation ratchet, as SwiftNIO keeps one: allocations of the hot paths, counted by the
// MallocInterposer, checked in CI against the thresholds committed in Thresholds/ by scripts/allocation-ratchet.
// The check fails when a scenario allocates more than its threshold allows, and also when it allocates clearly
// less (then the thresholds are updated and committed, so the ratchet only turns one way).
//
// Benchmark names are single words: the benchmark tool reads a threshold file back by the raw name but writes it
// under a sanitized one, so names with spaces would never match.
//
// Only malloc counts are checked: they do not depend on the machine's load. Each iteration runs 1,000
// operations (scaling factor .kilo).

import Benchmark
import BenchmarkSupport
import Herald

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.mallocCountTotal],
        warmupIterations: 20,
        scalingFactor: .kilo,
        maxDuration: .seconds(3),
        maxIterations: 300,
        // p90 within 10 % of the committed threshold, either way.
        thresholds: [.mallocCountTotal: .init(relative: [.p90: 10.0])]
    )

    Benchmark("FCMv1DecodeAndValidate") { benchmark in
        for _ in benchmark.scaledIterations {
            blackHole(try FCMSendRequest.decode(fcmBody, context: context))
        }
    }

    Benchmark(
        "BusDispatchInMemory",
        configuration: .init(
            setup: { BusFixture.inMemory.start() }, teardown: { BusFixture.inMemory.stop() }
        )
    ) { benchmark in
        BusFixture.inMemory.dispatch(count: benchmark.scaledIterations.count)
    }

    // The synchronous path: a data-only message to a SynchronousMessageHandler, without a task; messages carry
    // their IDs, as a receiver's decode gives them. Its threshold is 0, and a relative tolerance of 0 lets
    // anything through (the tool compares nothing against a base of 0): an absolute tolerance of 0 instead.
    Benchmark(
        "BusDispatchSynchronous",
        configuration: .init(
            thresholds: [.mallocCountTotal: .init(absolute: [.p90: 0])],
            setup: { SynchronousBusFixture.shared.start() }, teardown: { SynchronousBusFixture.shared.stop() }
        )
    ) { benchmark in
        SynchronousBusFixture.shared.dispatch(count: benchmark.scaledIterations.count)
    }

    // The same for display notifications to a SynchronousNotificationHandler and SynchronousPresenter.
    Benchmark(
        "BusDispatchSynchronousNotification",
        configuration: .init(
            thresholds: [.mallocCountTotal: .init(absolute: [.p90: 0])],
            setup: { SynchronousBusFixture.notifications.start() }, teardown: { SynchronousBusFixture.notifications.stop() }
        )
    ) { benchmark in
        SynchronousBusFixture.notifications.dispatch(count: benchmark.scaledIterations.count)
    }

    // A receiver's way in: the body decoded, named and delivered by MessageBus.submit.
    Benchmark(
        "BusSubmitInMemory",
        configuration: .init(
            setup: { BusFixture.inMemory.start() }, teardown: { BusFixture.inMemory.stop() }
        )
    ) { benchmark in
        BusFixture.inMemory.submit(count: benchmark.scaledIterations.count)
    }

    // Group commit makes the count per message vary with how many messages share a transaction: 20 %.
    Benchmark(
        "BusDispatchDurableInbox",
        configuration: .init(
            thresholds: [.mallocCountTotal: .init(relative: [.p90: 20.0])],
            setup: { BusFixture.durable.start() }, teardown: { BusFixture.durable.stop() }
        )
    ) { benchmark in
        BusFixture.durable.dispatch(count: benchmark.scaledIterations.count)
    }
}
