package coordinatortest

import (
	"testing"
	"time"

	"github.com/cbgrpc/cbgrpc/coordinator"
)

// Factory makes the coordinator under test for one subtest. The coordinator
// must read its time from clock, once per operation, and must not share
// state with coordinators made for other subtests unless scopes keep them
// apart (every subtest uses scopes of its own, except ScopesAreOpaque).
// Its store must have no replicas: the operators' commands report that
// they waited for none.
type Factory func(t *testing.T, clock func() time.Time) coordinator.Coordinator

// Run checks that the coordinators newCoordinator makes keep the breaker
// contract: one subtest per rule, each on a fresh coordinator and a fake
// clock, and then [Compare] against the in-process coordinator.
func Run(t *testing.T, newCoordinator Factory) {
	for _, r := range rules {
		t.Run(r.name, func(t *testing.T) { r.test(t, newCoordinator) })
	}
	t.Run("Compare", func(t *testing.T) { Compare(t, newCoordinator, CompareOptions{}) })
}

// rules lists the subtests by the part of the contract they pin; each part
// lives in the file of its name.
var rules = []struct {
	name string
	test func(*testing.T, Factory)
}{
	// closed.go
	{"ClosedAdmitsWithCurrentGeneration", testClosedAdmitsWithCurrentGeneration},
	{"ClosedCountsOutcomesOfCurrentGeneration", testClosedCountsOutcomesOfCurrentGeneration},
	{"ClosedTripsOnFailureRatio", testClosedTripsOnFailureRatio},
	{"ClosedRatioNeedsMinCalls", testClosedRatioNeedsMinCalls},
	{"ClosedTripsOnConsecutiveFailures", testClosedTripsOnConsecutiveFailures},
	{"ClosedSuccessResetsConsecutiveFailures", testClosedSuccessResetsConsecutiveFailures},
	{"ClosedTripsOnSlowCallRatio", testClosedTripsOnSlowCallRatio},
	// open.go
	{"OpenRejectsUntilOpenPeriodEnds", testOpenRejectsUntilOpenPeriodEnds},
	{"OpenMovesToHalfOpenOnFirstAdmitAfterPeriod", testOpenMovesToHalfOpenOnFirstAdmitAfterPeriod},
	{"LookingNeverUsesUpAProbe", testLookingNeverUsesUpAProbe},
	{"OpenRecordIsStale", testOpenRecordIsStale},
	{"OpenPeriodDoublesUpToMaxOpenFor", testOpenPeriodDoublesUpToMaxOpenFor},
	{"OpenPeriodKeepsOpenForUntilBackoffAfter", testOpenPeriodKeepsOpenForUntilBackoffAfter},
	{"ResultRetryAfterIsTimeLeftOpen", testResultRetryAfterIsTimeLeftOpen},
	{"TransitionOpenUntilIsEndOfOpenPeriod", testTransitionOpenUntilIsEndOfOpenPeriod},
	// halfopen.go
	{"HalfOpenLimitsProbes", testHalfOpenLimitsProbes},
	{"HalfOpenExpiredLeaseFreesSlot", testHalfOpenExpiredLeaseFreesSlot},
	{"HalfOpenSameClaimHoldsOneSlot", testHalfOpenSameClaimHoldsOneSlot},
	{"HalfOpenSameClaimDoesNotExtendLease", testHalfOpenSameClaimDoesNotExtendLease},
	{"HalfOpenExpiredClaimIsNewClaim", testHalfOpenExpiredClaimIsNewClaim},
	{"HalfOpenProbeFailureReopens", testHalfOpenProbeFailureReopens},
	{"HalfOpenProbeSuccessesClose", testHalfOpenProbeSuccessesClose},
	{"HalfOpenSettledSlotIsReused", testHalfOpenSettledSlotIsReused},
	{"HalfOpenSettleOfUnknownOrSettledClaimIsStale", testHalfOpenSettleOfUnknownOrSettledClaimIsStale},
	{"HalfOpenRecordIsStale", testHalfOpenRecordIsStale},
	{"HalfOpenRejectRetryAfterIsEarliestLeaseEnd", testHalfOpenRejectRetryAfterIsEarliestLeaseEnd},
	{"SlowProbeIsAFailedProbe", testSlowProbeIsAFailedProbe},
	// generations.go
	{"GenerationsFollowNextGeneration", testGenerationsFollowNextGeneration},
	{"OutcomeOfPastGenerationIsStale", testOutcomeOfPastGenerationIsStale},
	{"SettleWithOlderGenerationIsStale", testSettleWithOlderGenerationIsStale},
	{"GenerationsNeverReusedAfterForgetting", testGenerationsNeverReusedAfterForgetting},
	{"OutcomeOfForgottenGenerationStaysStale", testOutcomeOfForgottenGenerationStaysStale},
	// birth.go
	{"EveryWriteGivesBirth", testEveryWriteGivesBirth},
	{"BirthPersistsTheGeneration", testBirthPersistsTheGeneration},
	{"SnapshotNeverGivesBirth", testSnapshotNeverGivesBirth},
	{"RecordOnNotBornScopeBirthsAndIsStale", testRecordOnNotBornScopeBirthsAndIsStale},
	{"BirthForgetsBatchIDs", testBirthForgetsBatchIDs},
	// seen.go
	{"SeenAboveStoredGivesBirth", testSeenAboveStoredGivesBirth},
	{"SeenAboveOpenStateGivesBirth", testSeenAboveOpenStateGivesBirth},
	{"OutcomeAboveStoredGivesBirthAndIsStale", testOutcomeAboveStoredGivesBirthAndIsStale},
	{"ProbeAboveStoredGivesBirthAndIsStale", testProbeAboveStoredGivesBirthAndIsStale},
	{"SeenOnNotBornScope", testSeenOnNotBornScope},
	{"SeenAtOrBelowStoredChangesNothing", testSeenAtOrBelowStoredChangesNothing},
	{"SeenOnRecordGivesBirth", testSeenOnRecordGivesBirth},
	{"SeenOnPushGivesBirth", testSeenOnPushGivesBirth},
	{"SeenFromTheFutureCountsForNothing", testSeenFromTheFutureCountsForNothing},
	// lasttrip.go
	{"SnapshotKeepsTheLastTrip", testSnapshotKeepsTheLastTrip},
	// counts.go
	{"RecordAnswersTheWindowCounts", testRecordAnswersTheWindowCounts},
	// throttle.go
	{"ThrottledCountsAsARequestNotACall", testThrottledCountsAsARequestNotACall},
	{"ThrottledLeavesTheWindowAndGoesStale", testThrottledLeavesTheWindowAndGoesStale},
	// wouldreject.go
	{"WouldRejectCountedApartFromCalls", testWouldRejectCountedApartFromCalls},
	// layout.go
	{"LayoutStaysWhileItsReplicasRecord", testLayoutStaysWhileItsReplicasRecord},
	{"LayoutTakesOverOnceItsReplicasAreGone", testLayoutTakesOverOnceItsReplicasAreGone},
	{"LayoutShrinkingKeepsWhatTheNewWindowHolds", testLayoutShrinkingKeepsWhatTheNewWindowHolds},
	{"AlternatingLayoutsKeepTheWindowSliding", testAlternatingLayoutsKeepTheWindowSliding},
	{"SnapshotReadsTheStoredLayout", testSnapshotReadsTheStoredLayout},
	{"AlternatingLayoutsNeverCountTwice", testAlternatingLayoutsNeverCountTwice},
	{"TripUnderAnotherLayout", testTripUnderAnotherLayout},
	// breadth.go
	{"BreadthLoneReplicaIsItsOwnFleet", testBreadthLoneReplicaIsItsOwnFleet},
	{"BreadthOneReplicaFailingAloneNeverTripsTheFleet", testBreadthOneReplicaFailingAloneNeverTripsTheFleet},
	{"BreadthTripLeavesOutTheMostFailing", testBreadthTripLeavesOutTheMostFailing},
	{"BreadthRunLeavesOutTheMostFailing", testBreadthRunLeavesOutTheMostFailing},
	{"BreadthAnySuccessEndsTheRun", testBreadthAnySuccessEndsTheRun},
	{"BreadthOthersHeardWithinTheWindow", testBreadthOthersHeardWithinTheWindow},
	{"BreadthZeroKeepsThePlainRules", testBreadthZeroKeepsThePlainRules},
	// recent.go
	{"RecentFailuresTripBeforeTheWindow", testRecentFailuresTripBeforeTheWindow},
	{"RecentBelowTheRatioNeverTrips", testRecentBelowTheRatioNeverTrips},
	{"RecentCountsTheCallsTheFleetMakes", testRecentCountsTheCallsTheFleetMakes},
	{"RecentEndsAWindowAfterItBegan", testRecentEndsAWindowAfterItBegan},
	{"RecentSlowCallsTrip", testRecentSlowCallsTrip},
	{"RecentLeavesOutTheMostFailing", testRecentLeavesOutTheMostFailing},
	{"RecentHeldSuccessesCountFromAReplicasFirstFailure", testRecentHeldSuccessesCountFromAReplicasFirstFailure},
	{"RecentWaitsForTheFleetsPace", testRecentWaitsForTheFleetsPace},
	// stalls.go
	{"StalledCallsAreFailures", testStalledCallsAreFailures},
	{"StalledRunEndsWithASuccess", testStalledRunEndsWithASuccess},
	{"StalledCallsTripTheRecentRule", testStalledCallsTripTheRecentRule},
	// outliers.go
	{"OutlierIsToldAndLeavesTheWindow", testOutlierIsToldAndLeavesTheWindow},
	{"OutlierByRatioAfterAHealthySpell", testOutlierByRatioAfterAHealthySpell},
	{"OutlierNeedsAnotherReplica", testOutlierNeedsAnotherReplica},
	{"OutlierOutcomesAreStaleWhileIsolated", testOutlierOutcomesAreStaleWhileIsolated},
	{"OutlierProbeSuccessEndsTheSpell", testOutlierProbeSuccessEndsTheSpell},
	{"OutlierLateOutcomesAreNoProbe", testOutlierLateOutcomesAreNoProbe},
	{"OutlierProbeFailureDoublesThePeriod", testOutlierProbeFailureDoublesThePeriod},
	{"FleetTripEndsEverySpell", testFleetTripEndsEverySpell},
	{"OutlierTransitionsStayOffTheFeed", testOutlierTransitionsStayOffTheFeed},
	{"OutliersNeverMoreThanThePolicyAllows", testOutliersNeverMoreThanThePolicyAllows},
	{"OutliersTwoFailingAlone", testOutliersTwoFailingAlone},
	// carriedpolicies.go
	{"RecordCarriesItsPolicy", testRecordCarriesItsPolicy},
	{"CarriedPoliciesNewestFirst", testCarriedPoliciesNewestFirst},
	{"CarriedPolicyLeavesAfterAWindow", testCarriedPolicyLeavesAfterAWindow},
	{"CarriedPoliciesKeepTheNewest", testCarriedPoliciesKeepTheNewest},
	// ramp.go
	{"RampLeftAfterRecovery", testRampLeftAfterRecovery},
	{"NoRampWithoutRecovery", testNoRampWithoutRecovery},
	// push.go: the optional server pushback
	{"PushOpensOnceForThePeriod", testPushOpensOnceForThePeriod},
	{"PushPeriodIsCapped", testPushPeriodIsCapped},
	{"PushFencedByGeneration", testPushFencedByGeneration},
	{"PushAfterItsTripSetsThePeriod", testPushAfterItsTripSetsThePeriod},
	{"PushAfterItsProbeFailedSetsThePeriod", testPushAfterItsProbeFailedSetsThePeriod},
	{"PushAfterAnOpenIsFenced", testPushAfterAnOpenIsFenced},
	{"PushNeedsAReason", testPushNeedsAReason},
	// causes.go: the optional causes of transitions
	{"CauseIsAnsweredWithItsState", testCauseIsAnsweredWithItsState},
	{"CauseComesWithTheRamp", testCauseComesWithTheRamp},
	{"InvalidCauseIsAnError", testInvalidCauseIsAnError},
	{"WatchDeliversTheCause", testWatchDeliversTheCause},
	// expiry.go
	{"OpenStateNeverExpires", testOpenStateNeverExpires},
	{"HalfOpenStateNeverExpires", testHalfOpenStateNeverExpires},
	{"NewbornScopeIsKeptForAWindow", testNewbornScopeIsKeptForAWindow},
	{"ClosedScopeIdleForAWindowIsForgotten", testClosedScopeIdleForAWindowIsForgotten},
	{"ClosedScopeIsKeptWhileItsWindowHoldsOutcomes", testClosedScopeIsKeptWhileItsWindowHoldsOutcomes},
	// scopes.go
	{"ScopesAreOpaque", testScopesAreOpaque},
	{"DifferentScopesNeverInterfere", testDifferentScopesNeverInterfere},
	{"EmptyScopeIsRefused", testEmptyScopeIsRefused},
	// details.go: the details both coordinators settle the same way
	{"RatioRoundsToNearestThousandth", testRatioRoundsToNearestThousandth},
	{"BatchedRecordAppliesOutcomesInOrder", testBatchedRecordAppliesOutcomesInOrder},
	{"RestOfBatchIsStaleAfterTrip", testRestOfBatchIsStaleAfterTrip},
	{"LongBatchTripsWhereTheRulesFirstHold", testLongBatchTripsWhereTheRulesFirstHold},
	{"TransitionToOpenReleasesProbeLeases", testTransitionToOpenReleasesProbeLeases},
	{"TransitionToClosedReleasesProbeLeases", testTransitionToClosedReleasesProbeLeases},
	{"StateIsAsOfNow", testStateIsAsOfNow},
	{"StaleCountsEveryIgnoredOutcome", testStaleCountsEveryIgnoredOutcome},
	{"DuplicateBatchIsStale", testDuplicateBatchIsStale},
	{"InvalidPolicyIsAnError", testInvalidPolicyIsAnError},
	{"TransitionFields", testTransitionFields},
	// watch.go: the optional transition feed
	{"WatchDeliversTransitionsOfFollowedScopes", testWatchDeliversTransitionsOfFollowedScopes},
	{"WatchUnfollow", testWatchUnfollow},
	// override.go: the optional shared policy
	{"OverrideMergesAndVersions", testOverrideMergesAndVersions},
	{"OverrideFleetDefault", testOverrideFleetDefault},
	{"OverrideInvalidIsRefused", testOverrideInvalidIsRefused},
	{"OverrideKeysAreGoNames", testOverrideKeysAreGoNames},
	{"OverrideReset", testOverrideReset},
	{"AnswersCarryPolicyVersion", testAnswersCarryPolicyVersion},
	{"PolicyWatchDeliversChanges", testPolicyWatchDeliversChanges},
	// control.go: the optional operators' commands
	{"IsolateRejectsEveryAdmit", testIsolateRejectsEveryAdmit},
	{"IsolateForEndsByItself", testIsolateForEndsByItself},
	{"IsolateAgainWithAnotherEnd", testIsolateAgainWithAnotherEnd},
	{"IsolationEndsLazilyOnEveryWrite", testIsolationEndsLazilyOnEveryWrite},
	{"ReleaseClosesWithNewGeneration", testReleaseClosesWithNewGeneration},
	{"DisableAllowsAndNeverTrips", testDisableAllowsAndNeverTrips},
	{"EnableRestoresNormalRules", testEnableRestoresNormalRules},
	{"ManualStatesNeverExpire", testManualStatesNeverExpire},
	{"ManualStatesAreTransitions", testManualStatesAreTransitions},
	{"InvalidNoteIsAnError", testInvalidNoteIsAnError},
	{"NoReplicasNothingToWaitFor", testNoReplicasNothingToWaitFor},
	// check.go: the optional start-up check
	{"CheckPassesWhenServing", testCheckPassesWhenServing},
}
