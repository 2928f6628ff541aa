import HeraldTesting
import Logging
import ServiceLifecycle
import Testing

@testable import Herald

@Suite("Herald as a swift-service-lifecycle Service")
struct ServiceLifecycleTests {
    @Test("in a host's ServiceGroup, the group's graceful shutdown stops Herald: run returns, the loop is closed, in-flight work finished")
    func gracefulShutdownStopsHerald() async throws {
        let gate = GatedHandler()
        let herald = Herald(configuration: patientShutdown(.init(senderID: "1234567890")))
        let receiver = InMemoryReceiver()
        try herald.register(receiver)
        try herald.register(gate)
        let group = ServiceGroup(configuration: .init(services: [herald], logger: Logger(label: "test")))
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            let token = try await eventuallyToken(herald)
            guard case .success = try await receiver.sendFCM(fcmBody(token: token, data: ["k": "v"]), to: herald) else {
                Issue.record("refused")
                return
            }
            #expect(await eventually { gate.waiting == 1 })
            await group.triggerGracefulShutdown()
            // Herald drains: the held message is finished before it stops.
            gate.open()
            try await tasks.waitForAll()
        }
        #expect(gate.handled == 1)
        #expect(herald.loop.lifecycle == .closed)
        await #expect(throws: HeraldError.notRunning) { try await herald.token() }
    }

    @Test("cancelling the task that runs Herald stops it")
    func cancellationStopsHerald() async throws {
        let herald = Herald()
        let task = Task { try await herald.run() }
        _ = try await eventuallyToken(herald)
        task.cancel()
        try await task.value
        #expect(herald.loop.lifecycle == .closed)
    }

    /// Waits until the instance has started and returns its token.
    func eventuallyToken(_ herald: Herald) async throws -> String {
        #expect(await eventually { (try? await herald.token()) != nil }, "the instance started")
        return try await herald.token()
    }
}
