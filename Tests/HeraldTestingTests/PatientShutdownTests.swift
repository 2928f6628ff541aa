import Herald
import HeraldTesting
import Testing

@Suite("patientShutdown: a test's instance waits for its sinks and handlers; bounds a test chose are kept")
struct PatientShutdownTests {
    @Test("the default drain and grace become two minutes; other settings are untouched")
    func defaultsRaised() {
        let configuration = patientShutdown(Herald.Configuration(senderID: "42"))
        #expect(configuration.analyticsDrainTimeout == .seconds(120))
        #expect(configuration.shutdownGracePeriod == .seconds(120))
        #expect(configuration.senderID == "42")
        #expect(configuration.backgroundFetchDeadline == Herald.Configuration().backgroundFetchDeadline)
    }

    @Test("a drain or a grace the test set is kept, each on its own")
    func chosenKept() {
        var drain = Herald.Configuration(senderID: "1")
        drain.analyticsDrainTimeout = .milliseconds(200)
        #expect(patientShutdown(drain).analyticsDrainTimeout == .milliseconds(200))
        #expect(patientShutdown(drain).shutdownGracePeriod == .seconds(120))
        var grace = Herald.Configuration(senderID: "1")
        grace.shutdownGracePeriod = .milliseconds(50)
        #expect(patientShutdown(grace).shutdownGracePeriod == .milliseconds(50))
        #expect(patientShutdown(grace).analyticsDrainTimeout == .seconds(120))
    }
}
