package nvml

// StubsBuilt exports stubsBuilt to the external tests (package nvml_test).
const StubsBuilt = stubsBuilt
