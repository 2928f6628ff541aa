// Herald's EventLoop beside SwiftNIO's MultiThreadedEventLoopGroup(numberOfThreads: 1), scenario by scenario,
// in the same run. Each pair shares its name up to the colon, so the two rows sit next to each other.
//
// Every iteration runs `benchmark.scaledIterations.count` operations (1,000: scaling factor .kilo) and
// waits for the last one; the tables show figures per operation (the tool divides by the scaling factor
// unless it is run with `--scale`). Malloc counts are process-wide (the malloc interposer sums all threads),
// so they include the loop thread's.
//
// `cpuTotal` comes from /proc in scheduler ticks (10 ms), far coarser than one iteration (about 50 µs to
// 15 ms), so each iteration also records, as a custom metric, the CPU time of the two threads that do the
// work, the benchmark thread and the loop's thread, read from their own CPU-time clocks (nanoseconds).

import Benchmark

#if canImport(Glibc)
    import Glibc
#endif

/// CPU time of the benchmark thread plus the loop's thread during one iteration.
let workCPUTime = BenchmarkMetric.custom("CPU time, bench+loop threads (ns)", polarity: .prefersSmaller, useScalingFactor: true)

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .throughput, .mallocCountTotal, .cpuTotal, workCPUTime],
        timeUnits: .nanoseconds,
        units: [workCPUTime: .count],
        warmupIterations: 10,
        scalingFactor: .kilo,
        maxDuration: .seconds(4),
        maxIterations: 20_000
    )

    register(
        "1 execute from other thread", HeraldLoopFixture.self, NIOLoopFixture.self,
        herald: { $0.executeFromOtherThread(count: $1) },
        nio: { $0.executeFromOtherThread(count: $1) })

    register(
        "2 execute on loop", HeraldLoopFixture.self, NIOLoopFixture.self,
        herald: { $0.executeOnLoop(count: $1) },
        nio: { $0.executeOnLoop(count: $1) })

    register(
        "3 schedule zero-delay timer on loop", HeraldLoopFixture.self, NIOLoopFixture.self,
        herald: { $0.scheduleOnLoop(count: $1) },
        nio: { $0.scheduleOnLoop(count: $1) })

    register(
        "4 unix socket echo 64B round trip", HeraldEchoFixture.self, NIOEchoFixture.self,
        herald: { $0.echo(count: $1) },
        nio: { $0.echo(count: $1) })
}

/// Registers one scenario twice, "<name>: Herald" and "<name>: NIO", each with a fixture of its own set up
/// before its iterations and torn down after them. `body` runs `count` operations and returns once all are done.
private func register<HeraldSide: BenchmarkFixture, NIOSide: BenchmarkFixture>(
    _ name: String,
    _: HeraldSide.Type,
    _: NIOSide.Type,
    herald: @escaping (HeraldSide, Int) -> Void,
    nio: @escaping (NIOSide, Int) -> Void
) {
    register("\(name): Herald", body: herald)
    register("\(name): NIO", body: nio)
}

private func register<Fixture: BenchmarkFixture>(_ name: String, body: @escaping (Fixture, Int) -> Void) {
    let slot = FixtureSlot<Fixture>()
    Benchmark(name) { benchmark, fixture in
        let loopClock = fixture.loopCPUClock
        let cpuBefore = cpuNanoseconds(CLOCK_THREAD_CPUTIME_ID) + cpuNanoseconds(loopClock)
        body(fixture, benchmark.scaledIterations.count)
        let cpuAfter = cpuNanoseconds(CLOCK_THREAD_CPUTIME_ID) + cpuNanoseconds(loopClock)
        benchmark.measurement(workCPUTime, cpuAfter - cpuBefore)
    } setup: {
        try await slot.setUp()
    } teardown: {
        try await slot.tearDown()
    }
}
