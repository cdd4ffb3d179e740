// What each backend defines for the feature-map stages (feature_map/entries.cpp), called with
// validated arguments and at least one row.
#pragma once

#include "core/common.h"
#include "linear/feature_map/bidirectional.h"
#include "linear/feature_map/rows.h"

namespace ak::linear::feature_map {

AK_DECLARE_BACKENDS(void features(const FeaturesArgs& a); void feature_grad(const FeatureGradArgs& a);
                    void values(const ValuesArgs& a); void normalise(const NormaliseArgs& a);
                    void normalise_grad(const NormaliseGradArgs& a);
                    void bidirectional(const BidirectionalArgs& a);
                    void bidirectional_grad(const BidirectionalGradArgs& g);)

}  // namespace ak::linear::feature_map
